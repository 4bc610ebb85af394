"""Per-step metrics and final weight digests of short agentic (episodic) trainer runs.

The agentic counterpart of ``trainer_reference.py``: a refactor of the episodic trainer
or of an episodic method that is meant to keep behaviour must leave every case's record
equal, bit for bit. ``--save`` records the current code, ``--compare`` runs it again and
prints, per case, whether the metrics (wall-clock ``time/`` keys excluded), the token meter,
the method state, the written records and the final weights are identical, and which keys
differ.

    python tests/reference/agentic_reference.py --save /tmp/agentic_ref.json
    python tests/reference/agentic_reference.py --compare /tmp/agentic_ref.json [--cases gigpo,vsr]

Policy: the tiny Qwen2 (1 layer, 32 wide) behaviour-cloned for 150 steps on a noisy BFS
expert (so replies are often valid moves and groups have mixed returns); Sokoban 6x6, 1 box,
compact template, 6 turns, boards with 2-4 move solutions; 3 updates of 3 map seeds x 3 episodes, validation on 2 held-out
seeds every 2 updates, checkpoints every 2. ``*_resumed`` cases stop after 2 updates and
resume from the checkpoint to 3: their record must equal the uninterrupted case's. One torch
thread.
"""
from __future__ import annotations

import copy
import hashlib
import json
import sys
import time
from pathlib import Path

import torch
from records import parse_args, record_or_compare, weights_digest

BASE = {"task": "agentic", "steps": 3, "batch_prompts": 3, "max_new_tokens": 6, "val_size": 2, "val_every": 2, "ckpt_every": 2,
        "lr": 1e-3, "seed": 3}
# boards whose BFS plans are 2-4 moves (the policy solves some, so groups have mixed returns)
TRAIN_SEEDS = [1, 3, 9, 10, 13, 14, 16, 17, 20, 22]
VAL_SEEDS = [37, 52]

# name -> TrainConfig overrides (and the case whose record a resumed case must equal)
CASES: dict[str, dict] = {
    "gigpo": {"method": "grpo", "method_config": {"n": 3}},
    "episode_adv": {"method": "grpo", "method_config": {"n": 3}, "adv_estimator": "episode",
                    "loss_agg_mode": "seq-mean-token-mean", "micro_batch": 5},
    "gigpo_std": {"method": "grpo", "method_config": {"n": 3}, "gigpo_mode": "mean_std_norm",
                  "episode_stats": "episodes"},
    "vsr": {"method": "vsr", "method_config": {"n": 3, "expert_seed": True}},
    "vsr_no_scoring": {"method": "vsr_no_scoring", "method_config": {"n": 3, "rho": 1.0, "expert_seed": True}},
    "trace": {"method": "trace", "method_config": {"n": 3}},
}
RESUMED = {"gigpo_resumed": "gigpo", "vsr_resumed": "vsr", "trace_resumed": "trace"}


def make_env():
    from components.envs.sokoban import SokobanEnv

    return SokobanEnv(num_boxes=1, template="compact", max_steps=6)


def base_policy():
    """The tiny policy, behaviour-cloned for 150 steps on a 30 % noisy expert over 60 boards
    (deterministic; about 10 % success, 28 % invalid replies at temperature 1)."""
    from components.agentic.bc import demonstrations
    from components.agentic.policy import build_agent_tokenizer
    from components.policy.model import TinyPolicyConfig, build_policy
    from components.policy.pretraining import pretrain_policy

    tok = build_agent_tokenizer(max_positions=192)
    model = build_policy(TinyPolicyConfig(layers=1, hidden=32, heads=2, kv_heads=2, ffn=64, max_positions=192),
                         tok, seed=1)
    demos, _ = demonstrations(make_env, list(range(200, 260)), noise=0.3, seed=0)
    pretrain_policy(model, tok, demos, steps=150, batch_size=32, lr=3e-3, warmup=5, seed=0, progress=False)
    return tok, model


def expert_traces() -> dict[int, list[str]]:
    out = {}
    for s in TRAIN_SEEDS:
        env = make_env()
        env.reset(s)
        out[s] = env.optimal_plan()
    return out


def run_case(name: str, tok, model, work: Path) -> dict:
    from components.agentic.task import EpisodeTask
    from components.stages.base import NullTracker
    from components.trainer.embedded import EmbeddedTrainer
    from components.trainer.train_config import TrainConfig

    base = RESUMED.get(name, name)
    cfg = TrainConfig(**{**BASE, **CASES[base]})
    res = {"p0": {s: 0.3 for s in TRAIN_SEEDS}, "expert_traces": expert_traces()}
    if name in RESUMED:     # a run that stopped after 2 updates, then a fresh process-like restart
        first = EmbeddedTrainer(cfg.model_copy(update={"steps": 2}), copy.deepcopy(model), tok,
                                EpisodeTask(make_env), NullTracker())
        first.fit(TRAIN_SEEDS, VAL_SEEDS, res, work / name)
    t = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, EpisodeTask(make_env), NullTracker())
    t.fit(TRAIN_SEEDS, VAL_SEEDS, res, work / name)
    t.save_outputs(work / name / "out")
    records = {f: hashlib.sha256((work / name / "out" / f).read_bytes()).hexdigest()
               for f in ("metrics.jsonl", "tokens.json", "method_state.json", "summary.json")}
    hist = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in t.history]
    return {"history": hist, "weights": weights_digest(t.model), "meter": t.meter.totals(),
            "method_state": json.loads(json.dumps(t.method.state_dict())), "records": records,
            "summary": json.loads(json.dumps(t.summary()))}


def main() -> int:
    args, names = parse_args(__doc__, [*CASES, *RESUMED])
    torch.set_num_threads(1)
    t0 = time.monotonic()
    tok, model = base_policy()
    base_digest = weights_digest(model)
    print(f"base policy {base_digest[:12]} ({time.monotonic() - t0:.1f}s)")
    if args.compare and json.loads(args.compare.read_text()).get("_base") != base_digest:
        print("base policy differs from the reference's: comparisons are void")

    def info(rec: dict) -> str:
        last = rec["history"][-1]
        return (f"success {last.get('reward/mean', float('nan')):.3f} loss {last.get('train/loss', 0.0):+.5f} "
                f"gen_tokens {rec['meter']['generated_tokens']} weights {rec['weights'][:12]}")

    return record_or_compare(args, names, lambda n, work: run_case(n, tok, model, work), info,
                             out={"_base": base_digest}, also_equal=RESUMED)


if __name__ == "__main__":
    sys.exit(main())
