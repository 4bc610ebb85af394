"""Grading throughput: the project's Grader (worker processes, hard time limit, answer
cache) vs a plain single-process math-verify loop, on the same responses.

Responses: model-like outputs of the synthetic task (a trace ending in ``\\boxed{}``, 30 %
correct, answers repeating as they do in real rollouts). Prints items/s for both, their
agreement, and the ratio last.

    .venv/bin/python bench/grading_throughput.py [--n 3000]
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def synthetic(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    texts, golds = [], []
    for _ in range(n):
        gold = rng.randint(-30, 30)
        ans = gold if rng.random() < 0.3 else rng.randint(-30, 30)
        texts.append(f" 4+5=9. 9-3=6. \\boxed{{{ans}}}")
        golds.append(str(gold))
    return texts, golds


def plain_loop(texts, golds) -> list[float]:
    from math_verify import parse, verify

    out = []
    for t, g in zip(texts, golds):
        try:
            out.append(float(verify(parse(f"\\boxed{{{g}}}"), parse(t))))
        except Exception:  # noqa: BLE001 - the baseline just scores 0 like the grader would
            out.append(0.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    args = ap.parse_args()
    texts, golds = synthetic(args.n)
    from components.reward.grader import Grader

    t0 = time.perf_counter()
    base = plain_loop(texts, golds)
    t_plain = time.perf_counter() - t0
    with Grader(workers=2, timeout_s=5.0) as g:
        g.grade_batch(["\\boxed{1000}"], ["1000"])   # start the workers outside the timing (cold cache)
        t0 = time.perf_counter()
        ours = [x.score for x in g.grade_batch(texts, golds)]
        t_ours = time.perf_counter() - t0
        stats = dict(g.stats)
    agree = sum(a == b for a, b in zip(base, ours)) / len(base)
    print(f"plain math-verify loop: {len(texts) / t_plain:8.0f} items/s")
    print(f"Grader (2 workers, cache): {len(texts) / t_ours:8.0f} items/s  (cache hits {stats.get('cache_hits')}, "
          f"worker items {stats.get('worker_items')})")
    print(f"agreement with the plain loop: {agree:.4f}")
    print(f"Grader / plain loop: {t_plain / t_ours:.2f}x on {len(texts)} responses")


if __name__ == "__main__":
    main()
