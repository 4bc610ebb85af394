"""Every module of the project's packages imports on its own, in a fresh interpreter, and no
two modules import each other, directly or through others.

Why a fresh interpreter per module: an import that only works because some other module was
imported first (a cycle, a missing import hidden by a test's earlier imports) fails here.
Why a cycle check on top: a cycle through imports inside functions imports fine today and
breaks when someone moves one of them to the top of a file. The graph is grimp's (pinned in
requirements.lock): every ``import`` in a file, inside functions too, between modules of
``components``, ``analysis`` and ``dags``.

The Kubeflow compiler's modules import kfp, which lives in its own environment (.venv-kfp,
``make kfp-env``); they are imported there, as tests/kfp does (skipped without it, except in CI).
"""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("components", "analysis", "dags")
KFP_PYTHON = Path(os.environ.get("RLVR_KFP_PYTHON") or REPO / ".venv-kfp" / "bin" / "python")
KFP_MODULES = {f"components.kfp.{m}" for m in ("compiler", "local", "platform", "validate", "__main__")}


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def _cycles(graph) -> list[list[str]]:
    """One shortest cycle through each direct import that lies on one."""
    found = set()
    for m in graph.modules:
        for dep in graph.find_modules_directly_imported_by(m):
            back = graph.find_shortest_chain(importer=dep, imported=m)
            if back:
                cycle = [m, *back]
                i = cycle.index(min(cycle[:-1]))   # one spelling per cycle: start at its smallest name
                found.add(tuple(cycle[i:-1] + cycle[:i + 1]))
    return [list(c) for c in sorted(found)]


def test_no_import_cycle(graph):
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_cycle_check_finds_a_cycle(tmp_path, monkeypatch):
    """The check itself: a two-module package whose cycle runs through a function-level import."""
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclepkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from cyclepkg.a import b\n")
    (pkg / "c.py").write_text("import cyclepkg.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(grimp.build_graph("cyclepkg", cache_dir=None)) == [["cyclepkg.a", "cyclepkg.b", "cyclepkg.a"]]


def _import_in_fresh_python(python: Path | str, modules: list[str], home: Path) -> dict[str, str]:
    """{module: the last lines of its error} for each module whose import fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RLVR_", "MLFLOW_"))}
    env.update(PYTHONPATH=str(REPO), RLVR_HOME=str(home / "rlvr"), AIRFLOW_HOME=str(home / "airflow"))

    def one(m: str) -> tuple[str, int, str]:
        r = subprocess.run([str(python), "-c", f"import {m}"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=300)
        return m, r.returncode, "\n".join(r.stderr.strip().splitlines()[-3:])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return {m: err for m, rc, err in pool.map(one, modules) if rc != 0}


@pytest.mark.slow
def test_every_module_imports_in_a_fresh_interpreter(graph, tmp_path):
    """~110 interpreters; about a minute of CPU (torch, transformers, verl and airflow imports)."""
    modules = sorted(m for m in graph.modules if m not in KFP_MODULES)
    assert len(modules) > 80, modules        # the graph found the packages
    failed = _import_in_fresh_python(sys.executable, modules, tmp_path)
    assert not failed, "\n\n".join(f"{m}:\n{err}" for m, err in failed.items())


def test_kfp_modules_import_in_the_kfp_environment(graph, tmp_path):
    assert KFP_MODULES <= set(graph.modules), KFP_MODULES - set(graph.modules)
    if not KFP_PYTHON.exists():
        msg = f"{KFP_PYTHON} missing: the kfp environment is built by `make kfp-env`"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    failed = _import_in_fresh_python(KFP_PYTHON, sorted(KFP_MODULES), tmp_path)
    assert not failed, "\n\n".join(f"{m}:\n{err}" for m, err in failed.items())
