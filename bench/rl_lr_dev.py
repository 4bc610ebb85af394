"""Which trainer settings let GRPO improve prompts it never trained on? (a dev-set check)

Chooses settings for the sanity sweep WITHOUT looking at its held-out set: trains GRPO with
the embedded trainer's own loop (``EmbeddedTrainer.fit``) on the first ``--train`` prompts of a
band ``filter_hard`` artifact's ``train.jsonl`` and measures the pass rate on the LAST ``--dev``
prompts of that file (never trained on here), against the base policy, with the same sampling
seed for both (paired difference, 95 % bootstrap interval over dev prompts). The held-out file
that the sweep's verdict comes from is not read.

    .venv/bin/python bench/rl_lr_dev.py BASE_MODEL_ARTIFACT HARD_ARTIFACT --lr 2e-5 [--warmup 0]
        [--steps 60] [--train 800] [--dev 200] [--k 16] [--seed 0] [--base-only]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("hard")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--train", type=int, default=800)
    ap.add_argument("--dev", type=int, default=200)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-only", action="store_true", help="only the base policy's dev pass rates")
    a = ap.parse_args()

    import numpy as np
    import torch

    from bench.rl_generalization import paired_interval, pass_rates
    from components.data.schema import read_problems
    from components.stages.base import NullTracker
    from components.stages.common import grade_fn, load_model
    from components.trainer.config import TrainConfig
    from components.trainer.embedded import EmbeddedTrainer

    torch.set_num_threads(1)
    problems = read_problems(Path(a.hard) / "train.jsonl")
    if len(problems) < a.train + a.dev:
        sys.exit(f"{a.hard}/train.jsonl has {len(problems)} prompts, fewer than --train + --dev")
    train, dev = problems[: a.train], problems[-a.dev:]
    grade = grade_fn()
    try:
        model, tok = load_model(Path(a.base))
        base = np.asarray(pass_rates(model, tok, dev, grade, a.k, 1.0, 128, seed=777))
        if a.base_only:
            print(f"base: dev pass rate {base.mean():.3f} ({len(dev)} prompts x {a.k})")
            return
        cfg = TrainConfig(method="grpo", method_config={"n": 8}, seed=a.seed, steps=a.steps, batch_prompts=16,
                          lr=a.lr, warmup_steps=a.warmup, max_new_tokens=128, val_size=0, ckpt_every=10_000)
        trainer = EmbeddedTrainer(cfg, model, tok, grade, NullTracker())
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as work:
            trainer.fit(train, [], {}, Path(work))
        secs = time.monotonic() - t0
        rewards = [h["reward/mean"] for h in trainer.history if "reward/mean" in h]
        after = np.asarray(pass_rates(trainer.model, tok, dev, grade, a.k, 1.0, 128, seed=777))
    finally:
        grade.grader.close()
    d = after - base
    lo, hi = paired_interval(d)
    tenth = max(1, len(rewards) // 10)
    print(f"| {a.lr:g} | {a.warmup} | {a.steps} | {a.seed} | {np.mean(rewards[:tenth]):.3f} -> "
          f"{np.mean(rewards[-tenth:]):.3f} | {base.mean():.3f} | {after.mean():.3f} | "
          f"{d.mean():+.3f} [{lo:+.3f}, {hi:+.3f}] | {secs:.0f} s |")


if __name__ == "__main__":
    main()
