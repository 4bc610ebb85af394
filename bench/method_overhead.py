"""Per-step decision overhead of each allocation method at 512 prompts, as a ratio to the
step's generation time.

The overhead is the wall time of ``rollout`` + ``observe`` with an engine that answers
instantly (a fixed completion per sample), so only the method's own decisions are timed
(scoring, buffers, GP update + allocation, skipping rules, grouping). The generation
time of the same step is measured with the real transformers engine on the tiny policy
for a slice of the batch and scaled by the number of sequences the step generates.

    .venv/bin/python bench/method_overhead.py [--prompts 512] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from components.data.synthetic import generate_problems
from components.engine.base import Completion, Request, SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.methods.base import RolloutContext
from components.methods.registry import available, build
from components.policy.model import TinyPolicyConfig, build_policy
from components.policy.tokenizer import build_tokenizer


class InstantEngine:
    """Returns a fixed 40-token completion per sample, instantly; meters like the real one."""

    def __init__(self, tokenizer):
        self.tokenizer, self.meter = tokenizer, TokenMeter()
        ids = tuple(tokenizer.encode(" 1+2=3. 3+4=7. \\boxed{7}", add_special_tokens=False))
        self.done = Completion(ids, tokenizer.decode(list(ids)), "stop")

    def generate(self, requests, params, purpose="train_rollout"):
        done = self.done
        if len(done.token_ids) > params.max_new_tokens:     # a prefix (PAIR): cut at the limit
            ids = done.token_ids[: params.max_new_tokens]
            done = Completion(ids, self.tokenizer.decode(list(ids)), "length")
        self.meter.record(purpose, sum(len(r.context_ids) for r in requests),
                          sum(r.n for r in requests) * len(done.token_ids), sum(r.n for r in requests),
                          len(requests))
        return [[done] * r.n for r in requests]


def coin_reward(texts, golds, _rng=np.random.default_rng(0)):
    return [(float(_rng.random() < 0.3), "coin") for _ in texts]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gen-slice", type=int, default=32, help="prompts whose generation is timed and scaled")
    ap.add_argument("--methods", nargs="*", default=None, help="only these methods (default: every registered one)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    tok = build_tokenizer()
    probs = generate_problems(4 * args.prompts, [7], seed=0, operand_digits=1)
    traces = {p.uid: p.traces[0] for p in probs}

    # generation time per sequence with the real engine (tiny policy, 96 new tokens max)
    model = build_policy(TinyPolicyConfig(), tok, seed=0).eval()
    hf = HFEngine(model, tok, meter=TokenMeter())
    reqs = [Request(tuple(tok.encode(p.prompt, add_special_tokens=False)), n=8) for p in probs[: args.gen_slice]]
    t0 = time.perf_counter()
    hf.generate(reqs, SamplingParams(1.0, 1.0, 64, seed=0))
    gen_per_seq = (time.perf_counter() - t0) / (8 * args.gen_slice)

    print(f"{'method':20s} {'overhead ms':>12s} {'sequences':>10s} {'generation s (est.)':>20s} {'ratio':>8s}")
    for name in args.methods or available():
        times, seqs = [], 0
        for rep in range(args.repeats):
            m = build(name, {})
            eng = InstantEngine(tok)
            eng.model = model        # PG-OPD reads the student's logits for its top-k overlap probe
            m.setup(probs, {"tokenizer": tok, "expert_traces": traces, "p0": {p.uid: 0.02 for p in probs},
                            "teacher": model})   # PG-OPD's teacher: the same tiny policy (timing only)
            batch = getattr(m, "training_problems", lambda ps: ps)(probs)[: args.prompts]
            ctx = RolloutContext(engine=eng, grade=coin_reward,
                                 encode_prompt=lambda p: tuple(tok.encode(p.prompt, add_special_tokens=False)),
                                 sampling=SamplingParams(1.0, 1.0, 64, seed=0), step=rep)
            t0 = time.perf_counter()
            groups = m.rollout(batch, ctx, np.random.default_rng(rep))
            m.observe(groups)
            times.append(time.perf_counter() - t0)
            seqs = eng.meter.totals()["sequences"]
        ov = statistics.median(times)
        gen = seqs * gen_per_seq
        ratio = ov / gen if gen > 0 else float("nan")
        print(f"{name:20s} {1000 * ov:12.1f} {seqs:10d} {gen:20.1f} {ratio:8.4f}")
    print(f"generation: {1000 * gen_per_seq:.2f} ms per sequence (tiny policy, 2 threads)")


if __name__ == "__main__":
    main()
