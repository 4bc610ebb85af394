"""Agentic stages: ``task: agentic`` selects them, and a tiny agentic sweep runs end to end
through Airflow (``rlvr sweep``) with the real stages, tokens and tables."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from components import lineage

REPO = Path(__file__).resolve().parents[2]
SWEEP = """\
name: agentic-e2e
seeds: [0]
models: [tiny-agent]
model_specs:
  tiny-agent: {steps: 4, batch_size: 16, probe_seeds: 4}
methods: [grpo, vsr, vsr_no_scoring]
max_response_tokens: 6
stages:
  prepare_data: {task: agentic, env_config: {num_boxes: 1, max_steps: 4, template: compact},
                 pretrain_seeds: 8, train_pool: 6, heldout: 4}
  pretrain: {task: agentic, policy: {layers: 1, hidden: 32, heads: 2, kv_heads: 2, ffn: 64, max_positions: 128}}
  filter_hard: {task: agentic, k: 2, c: 1}
  seed_prefixes: {task: agentic}
  train: {task: agentic, steps: 2, batch_prompts: 2, val_size: 2, val_every: 1, ckpt_every: 1}
  evaluate: {task: agentic, episodes_per_seed: 2}
  tokens: {}
  tables: {paper: vsr_agentic}
method_config:
  grpo: {n: 2}
  vsr: {n: 2}
  vsr_no_scoring: {n: 2}
retries: 0
"""


def test_task_switch_selects_the_agentic_stage_modules():
    from components.stages import train

    p = lineage.check_params("train", {"task": "agentic", "method": "vsr", "method_config": {"rho": 0.25}})
    assert isinstance(p, train.Params) and p.adv_estimator == "gigpo" and p.batch_prompts == 4
    assert lineage.stage_module_path("train", {"task": "agentic"}) == "components.stages.train"
    bc = lineage.check_params("pretrain", {"task": "agentic"})       # the agent's defaults, one module
    assert (bc.policy.hidden, bc.batch_size, bc.max_new_tokens, bc.noise) == (64, 64, 8, 0.1)
    assert "noise" not in lineage.check_params("pretrain", {}).model_dump()   # math's cache key as before
    with pytest.raises(lineage.StageError, match=r"params\.noise: applies to task agentic only"):
        lineage.check_params("pretrain", {"noise": 0.3})
    assert lineage.stage_module_path("seed_prefixes", {"task": "agentic"}) == "components.stages.seed_prefixes"
    assert "task" not in lineage.check_params("seed_prefixes", {}).model_dump()
    with pytest.raises(lineage.StageError, match=r"params\.cut_fractions: applies to task math only"):
        lineage.check_params("seed_prefixes", {"task": "agentic", "cut_fractions": [0.5]})
    for stage in ("prepare_data", "filter_hard", "evaluate"):      # one module for every task
        assert lineage.stage_module_path(stage, {"task": "agentic"}) == f"components.stages.{stage}"
        assert "task" not in lineage.check_params(stage, {}).model_dump()
    ev = lineage.check_params("evaluate", {"task": "agentic"})
    assert (ev.seeds, ev.temperature, ev.max_new_tokens, ev.pass_ks) == ([0], 1.0, 8, None)
    with pytest.raises(lineage.StageError, match=r"params\.samples_per_seed: applies to task math only"):
        lineage.check_params("evaluate", {"task": "agentic", "samples_per_seed": 4})
    with pytest.raises(lineage.StageError, match=r"params\.env: applies to task agentic only"):
        lineage.check_params("prepare_data", {"env": "babyai"})
    with pytest.raises(lineage.StageError, match=r"params\.task: unknown task 'chess' \(known: math, agentic\)"):
        lineage.check_params("evaluate", {"task": "chess"})
    with pytest.raises(lineage.StageError, match=r"params\.task: unknown task 'chess' \(known: math, agentic\)"):
        lineage.check_params("train", {"task": "chess"})
    with pytest.raises(lineage.StageError, match=r"params\.batch_seeds: renamed: use batch_prompts"):
        lineage.check_params("train", {"task": "agentic", "batch_seeds": 4})
    with pytest.raises(lineage.StageError, match=r"params\.gamma: applies to task agentic only"):
        lineage.check_params("train", {"gamma": 0.9})
    with pytest.raises(lineage.StageError, match=r"params\.layout: applies to task agentic only"):
        lineage.check_params("train", {"layout": "serialized"})
    with pytest.raises(lineage.StageError, match=r"params\.adv_estimator: 'rloo' does not apply to task agentic"):
        lineage.check_params("train", {"task": "agentic", "adv_estimator": "rloo"})
    with pytest.raises(lineage.StageError, match="method .sft. does not apply to task agentic"):
        lineage.check_params("train", {"task": "agentic", "method": "sft"})
    with pytest.raises(lineage.StageError, match=r"method_config\.rho"):
        lineage.check_params("train", {"task": "agentic", "method": "vsr", "method_config": {"rho": 2}})
    with pytest.raises(lineage.StageError, match=r"min_successes"):
        lineage.check_params("filter_hard", {"task": "agentic", "c": 0, "min_successes": 1})


@pytest.mark.slow
def test_tiny_agentic_sweep_end_to_end(tmp_path):
    home = tmp_path / "home"
    sweep = tmp_path / "agentic-e2e.yaml"
    sweep.write_text(SWEEP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "RLVR_"))}
    env.update({"RLVR_HOME": str(home), "OMP_NUM_THREADS": "1"})
    r = subprocess.run([sys.executable, "-m", "components.cli", "sweep", str(sweep)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    arts = home / "artifacts"
    (tables,) = [d for d in (arts / "tables").iterdir() if (d / "manifest.json").is_file()]
    md = (tables / "tables.md").read_text()
    for m in ("grpo", "vsr", "vsr_no_scoring", "base"):
        assert f"| {m} " in md or f"|{m}" in md.replace(" ", ""), m
    side = (tables / "paper_vs_measured.md").read_text()
    assert "generated tokens VSR+GiGPO as % of GiGPO" in side and "48.3" in side
    evals = [json.loads((d / "results.json").read_text()) for d in (arts / "evaluate").iterdir()
             if (d / "results.json").is_file()]
    assert len(evals) == 4 and all(e["problems"] == 4 and e["samples_per_problem"] == 2 for e in evals)
    trains = [d for d in (arts / "train").iterdir() if (d / "manifest.json").is_file()]
    assert len(trains) == 3 and all((d / "summary.json").is_file() for d in trains), trains
    for d in trains:
        s = json.loads((d / "summary.json").read_text())
        hist = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        # every generated token of the run is in the per-update counts, and in tokens.json per turn
        assert s["generated_tokens"] == sum(h.get("tokens/generated", 0) for h in hist) > 0
        rows = [x for x in json.loads((d / "tokens.json").read_text()) if x["purpose"] == "train_rollout"]
        assert sum(x["generated_tokens"] for x in rows) == s["generated_tokens"] and all("turn" in x for x in rows)
