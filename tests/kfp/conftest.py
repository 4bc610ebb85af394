"""Fixtures of the Kubeflow tests. The compiler runs in the kfp environment (.venv-kfp,
`make kfp-env`), the plan steps and the stages in this one; the kfp side runs once per session
in its own subprocess and the tests read its JSON report.

Without .venv-kfp the tests that need it are skipped, naming `make kfp-env`; in CI (CI set)
they fail instead: .ci/run builds the environment first.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kfp_testlib import HERE, KFP_PYTHON, REPO, SWEEPS, clean_env, last_json


@pytest.fixture(scope="session")
def kfp_python() -> Path:
    if not KFP_PYTHON.exists():
        msg = f"{KFP_PYTHON} missing: the kfp environment is built by `make kfp-env`"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return KFP_PYTHON


@pytest.fixture(scope="session")
def kfp_report(kfp_python, tmp_path_factory) -> tuple[Path, dict]:
    """Every sweep in dags/sweeps compiled, validated and dry-run (tests/kfp/kfp_side.py)."""
    out = tmp_path_factory.mktemp("kfp")
    # the plan steps run in this environment (the images' one), found next to this python
    r = subprocess.run([str(kfp_python), str(HERE / "kfp_side.py"), str(out), str(Path(sys.executable).parent),
                        *map(str, SWEEPS)], cwd=REPO,
                       env=clean_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    # kfp.local's threaded print indentation leaks a wrapper per task unless
    # components/kfp/local.py:run_local stops it: output then grows with every step
    assert len(r.stdout) < 20_000_000, f"kfp_side.py printed {len(r.stdout):,} characters"
    return out, last_json(r.stdout)
