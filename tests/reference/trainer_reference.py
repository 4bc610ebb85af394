"""Per-step metrics and final weight digests of short embedded-trainer runs, one per case.

A refactor of the trainer or of a method that is meant to keep behaviour must leave every
case's record equal, bit for bit: ``--save`` records the current code, ``--compare`` runs it
again and prints, per case, whether the metrics (wall-clock ``time/`` keys excluded) and the
final weights are identical, and which keys differ.

    PYTHONPATH=tests/support python tests/reference/trainer_reference.py --save /tmp/ref.json
    PYTHONPATH=tests/support python tests/reference/trainer_reference.py --compare /tmp/ref.json [--cases grpo,dapo]

(``tests/support`` holds the tiny policy, as pytest's ``pythonpath`` has it; ``test_reference.py``
runs two cases under pytest.)

Tiny random policy (``tests/support/tiny.py``), synthetic problems, a deterministic reward on the
text (mixed groups from an untrained policy), 3 steps, one torch thread.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
from records import parse_args, record_or_compare, weights_digest

BASE = {"steps": 3, "batch_prompts": 4, "max_new_tokens": 12, "val_size": 2, "val_samples": 1,
        "ckpt_every": 2, "val_every": 2, "lr": 1e-3, "seed": 3}

# name -> TrainConfig overrides. ppo_epochs=2 / kl cases exercise the loss's off-policy terms.
CASES: dict[str, dict] = {
    "grpo": {"method": "grpo", "method_config": {"n": 4}},
    "grpo_ppo2": {"method": "grpo", "method_config": {"n": 4}, "ppo_epochs": 2, "micro_batch": 5},
    "grpo_kl": {"method": "grpo", "method_config": {"n": 4}, "kl_coef": 0.1},
    # large steps between the epochs: ratios leave [1 - clip, 1 + clip] and can pass the dual clip
    "grpo_ppo4_hot": {"method": "grpo", "method_config": {"n": 4}, "ppo_epochs": 4, "lr": 5e-2},
    "rl_zvp_ppo4_hot": {"method": "rl_zvp", "method_config": {"n": 4}, "ppo_epochs": 4, "lr": 5e-2},
    "grpo_rloo_tokmean": {"method": "grpo", "method_config": {"n": 4}, "adv_estimator": "rloo",
                          "loss_agg_mode": "token-mean", "clip_high": 0.28},
    "vsr": {"method": "vsr", "method_config": {"n": 4, "rho": 0.5}},
    "sft": {"method": "sft"},
    "rl_zvp": {"method": "rl_zvp", "method_config": {"n": 4}},
    "rl_zvp_ppo2": {"method": "rl_zvp", "method_config": {"n": 4}, "ppo_epochs": 2},
    "reinforce_ada_est": {"method": "reinforce_ada_est", "method_config": {"n_mean": 4, "n_min": 2, "n_max": 8},
                          "adv_estimator": "drgrpo"},
    "reinforce_ada_seq": {"method": "reinforce_ada_seq", "method_config": {"round_repeat": 4, "max_rounds": 2}},
    "greso": {"method": "greso", "method_config": {"n": 4}},
    "greso_adaptive": {"method": "greso", "method_config": {"n": 4, "batch_filling": "adaptive"}},
    "dapo": {"method": "dapo", "method_config": {"n": 4}},
    "dapo_mult1": {"method": "dapo", "method_config": {"n": 4, "gen_batch_multiplier": 1.0}},
    "vip": {"method": "vip", "method_config": {"budget_per_prompt": 4}},
    "vigor": {"method": "vigor"},
    "pods": {"method": "pods", "method_config": {"n": 8, "m": 4}},
    "vsr_no_scoring": {"method": "vsr_no_scoring", "method_config": {"n": 4}},
    "vsr_no_recency": {"method": "vsr_no_recency", "method_config": {"n": 4, "freeze_after": 1}},
    "static_prefix": {"method": "static_prefix", "method_config": {"n": 4}},
    "vip_graph": {"method": "vip_graph", "method_config": {"budget_per_prompt": 4}},
    "vigor_graph": {"method": "vigor_graph"},
    "greso_graph": {"method": "greso_graph", "method_config": {"n": 4}},
}


def rule_reward(texts, golds):
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


def run_case(name: str, tok, model, problems, work: Path) -> dict:
    from components.stages.base import NullTracker
    from components.trainer.embedded import EmbeddedTrainer
    from components.trainer.train_config import TrainConfig

    cfg = TrainConfig(**{**BASE, **CASES[name]})
    t = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, rule_reward, NullTracker())
    res = {"expert_traces": {p.uid: p.traces[0] for p in problems}, "p0": {p.uid: 0.3 for p in problems}}
    t.fit(problems, problems[:2], res, work / name)
    hist = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in t.history]
    return {"history": hist, "weights": weights_digest(t.model), "meter": t.meter.totals(),
            "method_state": json.loads(json.dumps(t.method.state_dict()))}


def setup():
    """(tokenizer, tiny policy, problems) every case starts from."""
    from components.data.synthetic import generate_problems
    from components.policy.tokenizer import build_tokenizer
    from tiny import tiny_test_policy

    tok = build_tokenizer()
    return tok, tiny_test_policy(tok), generate_problems(12, [3], seed=1)


def main() -> int:
    args, names = parse_args(__doc__, list(CASES))
    torch.set_num_threads(1)
    tok, model, problems = setup()
    return record_or_compare(args, names, lambda n, work: run_case(n, tok, model, problems, work))


if __name__ == "__main__":
    sys.exit(main())
