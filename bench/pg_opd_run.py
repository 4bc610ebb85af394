"""A short embedded run of PG-OPD against plain OPD (the same module, pruning off) from one
student and one teacher checkpoint: generated training tokens, held-out accuracy before and
after, the per-token reverse KL(student || teacher) on the student's own samples of 64
held-out prompts before and after (is it distilling?), the share of candidates continued
past the prefix, wall time.

Both runs start from the same student weights and see the same batches (the trainer's seeded
order); the grader is the project's math-verify pool. Problems: synthetic arithmetic with
1-digit operands (the pretrain distribution), ``--levels`` terms, a disjoint held-out set.

    .venv/bin/python bench/pg_opd_run.py --student DIR --teacher DIR [--steps 20] [--batch 16]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from components.data.prompting import encode_prompt  # noqa: E402
from components.data.synthetic import generate_problems  # noqa: E402
from components.engine.base import Request, SamplingParams, TokenMeter  # noqa: E402
from components.engine.hf import HFEngine  # noqa: E402
from components.methods.pg_opd import token_logprobs  # noqa: E402
from components.stages.base import NullTracker  # noqa: E402
from components.stages.common import grade_fn, load_model  # noqa: E402
from components.trainer.embedded import EmbeddedTrainer  # noqa: E402
from components.trainer.train_config import TrainConfig  # noqa: E402


def reverse_kl(model, teacher, tok, problems, max_new_tokens: int) -> float:
    """Per-token reverse-KL estimate on the student's own samples (one per problem, fixed seed):
    mean over sampled response tokens of log pi_S - log pi_T."""
    eng = HFEngine(model, tok, meter=TokenMeter())
    ctxs = [encode_prompt(p, tok, "raw") for p in problems]
    outs = eng.generate([Request(tuple(c), n=1) for c in ctxs], SamplingParams(1.0, 1.0, max_new_tokens, seed=5),
                        purpose="validation")
    seqs = [tuple(c) + tuple(o[0].token_ids) for c, o in zip(ctxs, outs)]
    starts = [len(c) for c in ctxs]
    s, _ = token_logprobs(model, seqs, starts, tok.pad_token_id)
    t, _ = token_logprobs(teacher, seqs, starts, tok.pad_token_id)
    diffs = [a - b for x, y in zip(s, t) for a, b in zip(x, y)]
    return float(np.mean(diffs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--student", required=True, type=Path, help="model artifact dir of the student")
    ap.add_argument("--teacher", required=True, type=Path, help="model artifact dir of the teacher")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--prefix", type=int, default=32)
    ap.add_argument("--probe", type=int, default=16)
    ap.add_argument("--keep", type=float, default=0.5)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--levels", type=int, nargs="+", default=[4, 5, 6])
    ap.add_argument("--heldout", type=int, default=128)
    ap.add_argument("--val-samples", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", nargs="+", default=["opd", "pg_opd"])
    args = ap.parse_args()
    torch.set_num_threads(1)

    train = generate_problems(args.batch * args.steps, args.levels, seed=100 + args.seed, operand_digits=1)
    held = generate_problems(args.heldout, args.levels, seed=200 + args.seed, operand_digits=1,
                             exclude=[p.uid for p in train])
    grade = grade_fn()
    teacher, _ = load_model(args.teacher)
    teacher.eval()
    rows = {}
    try:
        for mode in args.modes:
            model, tok = load_model(args.student)
            mc = {"n": args.n, "prefix_tokens": args.prefix, "probe_tokens": args.probe, "keep_fraction": args.keep}
            cfg = TrainConfig(method=mode, method_config=mc, steps=args.steps, batch_prompts=args.batch,
                              max_new_tokens=args.max_new_tokens, lr=args.lr, seed=args.seed,
                              val_size=args.heldout, val_samples=args.val_samples, val_every=args.steps,
                              ckpt_every=args.steps)
            kl0 = reverse_kl(model, teacher, tok, held[:64], args.max_new_tokens)
            t0 = time.monotonic()
            trainer = EmbeddedTrainer(cfg, model, tok, grade, NullTracker())
            with tempfile.TemporaryDirectory() as work:
                summary = trainer.fit(train, held, {"teacher": args.teacher}, Path(work))
            acc = [h["val/accuracy"] for h in trainer.history if "val/accuracy" in h]
            cont = [h["method/continued_frac"] for h in trainer.history if "method/continued_frac" in h]
            wall = time.monotonic() - t0
            rows[mode] = {"generated_tokens": summary["generated_tokens"], "rollouts": summary["rollouts"],
                          "kl_before": kl0, "kl_after": reverse_kl(trainer.model, teacher, tok, held[:64],
                                                                    args.max_new_tokens),
                          "acc_before": acc[0], "acc_after": acc[-1],
                          "continued_frac": float(np.mean(cont)) if cont else 1.0,
                          "wall_s": wall}
            print(mode, json.dumps(rows[mode]), flush=True)
    finally:
        grade.grader.close()

    print(f"\nstudent {args.student}\nteacher {args.teacher}")
    print(f"{args.steps} steps x {args.batch} prompts x n={args.n}, {args.max_new_tokens} new tokens max, "
          f"prefix {args.prefix}, probe {args.probe}, keep {args.keep}, lr {args.lr}, levels {args.levels}, "
          f"held-out {args.heldout} x {args.val_samples} samples, seed {args.seed}")
    print(f"{'mode':8s} {'train tokens':>13s} {'acc before':>11s} {'acc after':>10s} {'KL before':>10s} "
          f"{'KL after':>9s} {'continued':>10s} {'wall s':>8s}")
    for mode, r in rows.items():
        print(f"{mode:8s} {r['generated_tokens']:13d} {r['acc_before']:11.4f} {r['acc_after']:10.4f} "
              f"{r['kl_before']:10.4f} {r['kl_after']:9.4f} {r['continued_frac']:10.3f} {r['wall_s']:8.0f}")
    if {"opd", "pg_opd"} <= set(rows):
        saved = 1 - rows["pg_opd"]["generated_tokens"] / rows["opd"]["generated_tokens"]
        print(f"PG-OPD tokens saved vs OPD: {100 * saved:.1f}%")


if __name__ == "__main__":
    main()
