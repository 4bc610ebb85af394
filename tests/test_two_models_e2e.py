"""A sweep of two models through the REAL stages (the papers' tables train several): each model
is pretrained and filters its own held-out split, and the tables keep the models apart, one row
per (model, method), a paired difference within each model, token counts per model, and the
claims pair each model's runs and untrained row with its own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from tiny_sweep import tiny_sweep

from components import lineage

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def test_two_models_are_tabulated_and_judged_apart(tmp_path, monkeypatch):
    cfg = yaml.safe_load(tiny_sweep("two", methods=("grpo", "vsr")))
    small = {**cfg["model_specs"]["tiny"], "policy": {"layers": 1, "hidden": 32, "heads": 2, "kv_heads": 2, "ffn": 64}}
    cfg.update(models=["tiny", "tiny-small"], seeds=[0, 1], model_specs={"tiny": cfg["model_specs"]["tiny"],
                                                                          "tiny-small": small})
    sweep = tmp_path / "two.yaml"
    sweep.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "RLVR_"))}
    env.update({"RLVR_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"})
    r = subprocess.run([sys.executable, "-m", "components.cli", "sweep", str(sweep)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])

    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    c = lineage.client()
    runs = c.search_runs([c.get_experiment_by_name("two").experiment_id], max_results=1000)
    out = {x.data.tags["rlvr.stage"]: Path(x.data.tags["rlvr.output_uri"]) for x in runs if "rlvr.stage" in x.data.tags
           and x.data.tags["rlvr.stage"] in ("tables", "tokens")}
    table = pd.read_csv(out["tables"] / "tables.csv")
    assert set(zip(table["model"], table["method"])) == {(m, k) for m in ("tiny", "tiny-small")
                                                          for k in ("base", "grpo", "vsr")}
    held = table.set_index(["model", "method"])
    # each model's held-out split is its own base policy's filter: problem counts need not match,
    # and every row of a model has that model's count
    for m in ("tiny", "tiny-small"):
        assert held.loc[(m, "grpo"), "problems"] == held.loc[(m, "vsr"), "problems"] == held.loc[(m, "base"), "problems"]
        assert held.loc[(m, "grpo"), "seeds"] == 2 and pd.notna(held.loc[(m, "vsr"), "diff_vs_grpo"])
    tokens = pd.read_csv(out["tokens"] / "tokens.csv").set_index(["model", "method"])
    trains = [json.loads((Path(x.data.tags["rlvr.output_uri"]) / "summary.json").read_text()) | {
              "cell": x.data.tags.get("rlvr.model")} for x in runs if x.data.tags.get("rlvr.stage") == "train"]
    for m in ("tiny", "tiny-small"):
        gen = [s["generated_tokens"] for s in trains if s["cell"] == m and s["method"] == "grpo"]
        assert len(gen) == 2 and tokens.loc[(m, "grpo"), "generated_tokens"] == sum(gen) / 2
    claims = pd.read_csv(out["tables"] / "claims.csv").set_index("id")
    assert claims.loc["vsr>grpo", "verdict"] != "not tested" and "2 models" in claims.loc["vsr>grpo", "note"]
    assert claims.loc["grpo>base", "verdict"] != "not tested"                  # each model's own base row
    assert claims.loc["vsr_tokens<grpo", "seeds"] == 4                         # (model, seed): 2 x 2 runs
