"""Shared fixtures of the fault-injection tests: an isolated RLVR_HOME with an
already-migrated MLflow store, the toy + fault stages registered, and an environment
for subprocesses that sees the same stages."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import toy_stages
from components import lineage

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FAULT_STAGES = {"train_inputs": "faults.fault_stages:train_inputs", "writer": "faults.fault_stages:writer",
                "ticker": "faults.fault_stages:ticker"}


def make_home(path: Path) -> Path:
    toy_stages.premigrated_mlflow_db(path)
    return path


def subprocess_env(home: Path, overrides: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child `rlvr` process: this home, these stage overrides, nothing
    inherited from the caller's RLVR_/MLFLOW_/AIRFLOW/TOY_/FAULT_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "TOY_", "RLVR_", "FAULT_"))}
    path = [str(TESTS / "support"), str(TESTS), str(REPO), env.get("PYTHONPATH", "")]  # toy_stages, faults.*
    env.update({"RLVR_HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(path).rstrip(os.pathsep)})
    if overrides:
        env[lineage.OVERRIDES_ENV] = json.dumps(overrides)
    env.update(extra)
    return env


@pytest.fixture()
def home(tmp_path, monkeypatch):
    """RLVR_HOME in tmp_path; every toy stage and the fault stages registered in-process."""
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(lineage.OVERRIDES_ENV, raising=False)
    for v in ("TOY_FAIL", "TOY_SLEEP", "TOY_CALLS", "FAULT_ENOSPC_AFTER", "FAULT_FAIL_MARKER"):
        monkeypatch.delenv(v, raising=False)
    make_home(tmp_path / "rlvr")
    saved = dict(lineage.STAGES)
    for n in toy_stages.ALL:
        lineage.register_stage(n, f"toy_stages:{n}")
    for n, path in FAULT_STAGES.items():
        lineage.register_stage(n, path)
    yield tmp_path / "rlvr"
    lineage.STAGES.clear()
    lineage.STAGES.update(saved)


def stage_runs(stage: str | None = None, sweep: str | None = None) -> list:
    """Every MLflow run of this home (all experiments), optionally of one stage / sweep."""
    c = lineage.client()
    exp_ids = [e.experiment_id for e in c.search_experiments()]
    runs = c.search_runs(exp_ids, max_results=5000) if exp_ids else []
    return [r for r in runs if (stage is None or r.data.tags.get("rlvr.stage") == stage)
            and (sweep is None or r.data.tags.get("rlvr.sweep") == sweep)]
