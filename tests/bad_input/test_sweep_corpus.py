"""Broken sweep files through the real `rlvr sweep` pre-flight (sweep model + every
stage's Params): exit code 2, ONE line on stderr that starts with the file and the
field path, and nothing started (no Airflow home, no MLflow store). A YAML tag that
would run Python if loaded unsafely is refused as a syntax error."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from components.cli import app

from .conftest import yaml_cases

CASES = yaml_cases("sweep_files.yaml")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_sweep_is_one_line_naming_file_and_field(case, tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    monkeypatch.delenv("RLVR_STAGE_OVERRIDES", raising=False)
    f = tmp_path / f"{case['id']}.yaml"
    f.write_text(case["text"] if "text" in case else yaml.safe_dump(case["sweep"], sort_keys=False))
    r = CliRunner().invoke(app, ["sweep", str(f)])
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"{f}: {case['field']}"), r.stderr
    assert case["expect"] in r.stderr, r.stderr
    assert not (tmp_path / "rlvr").exists()                     # nothing started
    assert not Path("/tmp/rlvr-pwned").exists()


def test_corpus_size():
    assert len(CASES) >= 30
