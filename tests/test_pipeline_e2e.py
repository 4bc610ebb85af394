"""The whole embedded pipeline with the REAL stages, at a tiny size, through Airflow.

`rlvr sweep` runs the DAG with dag.test() on SQLite; every stage trains / generates /
grades for real (a 1-layer policy, a few steps), MLflow on SQLite records it. Checks
the wiring and the promises: every artifact verifies, the tables list the base policy
first and every method, token accounting is consistent with the training logs, the
MLflow runs carry lineage, and a second run is all cache hits.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from tiny_sweep import tiny_sweep

from components import lineage

REPO = Path(__file__).resolve().parents[1]
SWEEP = tiny_sweep("e2e", methods=("grpo", "vsr", "sft"))


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    home = root / "home"
    sweep = root / "e2e.yaml"
    sweep.write_text(SWEEP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "RLVR_"))}
    env.update({"RLVR_HOME": str(home), "OMP_NUM_THREADS": "1"})
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-m", "components.cli", "sweep", str(sweep)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
        outs.append(r.stdout + r.stderr)
    return home, outs


def _runs(home, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    c = lineage.client()
    exp = c.get_experiment_by_name("e2e")
    return c, c.search_runs([exp.experiment_id], max_results=1000)


def test_every_stage_ran_once_and_verifies(sweep_run, monkeypatch):
    home, (first, second) = sweep_run
    c, runs = _runs(home, monkeypatch)
    stage_runs = [r for r in runs if "rlvr.stage" in r.data.tags]
    stages = sorted(r.data.tags["rlvr.stage"] for r in stage_runs)
    # 3 train runs, 4 evaluations (base + 3 methods): all from the first sweep execution
    assert stages == sorted(["prepare_data", "pretrain", "filter_hard", "seed_prefixes", "train", "train", "train",
                             "evaluate", "evaluate", "evaluate", "evaluate", "tokens", "tables"])
    assert all(r.info.status == "FINISHED" for r in stage_runs)
    parents = {r.data.tags.get("mlflow.parentRunId") for r in stage_runs}
    assert len(parents) == 1 and None not in parents                     # children of the first sweep run
    for r in stage_runs:
        uri = Path(r.data.tags["rlvr.output_uri"])
        assert lineage.verify_manifest(uri), uri
    train = next(r for r in stage_runs if r.data.tags["rlvr.stage"] == "train"
                 and json.loads((Path(r.data.tags["rlvr.output_uri"]) / "summary.json").read_text())["method"] == "vsr")
    keys = {m.key for m in c.get_metric_history(train.info.run_id, "reward/mean")} | set(train.data.metrics)
    assert {"reward/mean", "groups/mixed_frac", "response/length_mean", "tokens/generated",
            "val/accuracy"} <= keys
    assert len(c.get_metric_history(train.info.run_id, "reward/mean")) == 3      # one point per step
    assert json.loads(train.data.tags["rlvr.inputs"])                              # upstream run ids


def test_second_run_is_all_cache_hits(sweep_run, monkeypatch):
    home, (first, second) = sweep_run
    _, runs = _runs(home, monkeypatch)
    assert sum("rlvr.stage" in r.data.tags for r in runs) == 13                 # nothing recomputed
    assert "rlvr ui" in second


def test_tables_and_token_accounting(sweep_run, monkeypatch):
    home, (first, _) = sweep_run
    _, runs = _runs(home, monkeypatch)
    by_stage = {}
    for r in runs:
        if "rlvr.stage" in r.data.tags:
            by_stage.setdefault(r.data.tags["rlvr.stage"], []).append(Path(r.data.tags["rlvr.output_uri"]))
    table = pd.read_csv(by_stage["tables"][0] / "tables.csv")
    assert table["method"].tolist() == ["base", "sft", "grpo", "vsr"]
    assert ((table["mean@k"] >= 0) & (table["mean@k"] <= 1)).all()
    assert (by_stage["tables"][0] / "curves.png").stat().st_size > 1000
    tokens = pd.read_csv(by_stage["tokens"][0] / "tokens.csv").set_index("method")
    for d in by_stage["train"]:
        s = json.loads((d / "summary.json").read_text())
        hist = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        gen = sum(h.get("tokens/generated", 0) for h in hist)
        assert tokens.loc[s["method"], "generated_tokens"] == gen == s["generated_tokens"]
        assert tokens.loc[s["method"], "rollouts"] == (0 if s["method"] == "sft" else 3 * 4 * 4)
    assert "base" in first and "vsr" in first                                   # tables printed at the end
