"""Time VIP's per-step CPU work: GP prediction, allocation and the option-A GP update.

For a batch of B prompts (default 512 and 4096) drawn from a pool of synthetic prompts
(hashing embeddings, 384-d), each call = predict the batch's latent means against every
prompt seen so far, allocate C = 8 B rollouts (RLOO and Dr. GRPO: bisection + greedy
rounding; the pure greedy from L for comparison) and update the GP with simulated success
rates. The support (prompts seen) grows by B per call, so later calls are the costly ones;
the table prints ms per call, the support size the last call ran against and the bisection
allocation's time as a ratio to the pure greedy's (the baseline, same calls).

    .venv/bin/python bench/vip_allocation.py                 # B = 512 and 4096, 1 thread
    .venv/bin/python bench/vip_allocation.py --batches 512 --calls 8 --pool 16384
"""
from __future__ import annotations

import argparse
import os
import time

_ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
_ap.add_argument("--batches", default="512,4096", help="batch sizes (prompts per step)")
_ap.add_argument("--calls", type=int, default=4, help="steps timed per batch size")
_ap.add_argument("--pool", type=int, default=16384, help="prompts in the pool")
_ap.add_argument("--threads", type=int, default=1)
_ap.add_argument("--seed", type=int, default=0)
ARGS = _ap.parse_args()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)          # before numpy loads its BLAS


import numpy as np

from components.methods.vip import (HashingEmbedder, PoolGP, allocate, greedy_allocate,
                                    median_bandwidth, sigmoid)


def prompts(n: int, rng: np.random.Generator) -> list[str]:
    out = []
    for _ in range(n):
        terms = rng.integers(1, 100, size=int(rng.integers(2, 9)))
        ops = rng.choice(["+", "-", "*"], size=len(terms) - 1)
        expr = str(terms[0]) + "".join(f" {o} {t}" for o, t in zip(ops, terms[1:]))
        out.append(f"Compute {expr}. Put the final answer in \\boxed{{}}.")
    return out


def ms(fn):
    t = time.perf_counter()
    out = fn()
    return out, 1e3 * (time.perf_counter() - t)


def main() -> None:
    rng = np.random.default_rng(ARGS.seed)
    texts = prompts(ARGS.pool, rng)
    E, t_embed = ms(lambda: HashingEmbedder().embed(texts))
    h, t_h = ms(lambda: median_bandwidth(E, 1024))
    print(f"pool {ARGS.pool} prompts: hashing embed {t_embed:.0f} ms ({1e3 * t_embed / ARGS.pool:.1f} us/prompt), "
          f"median bandwidth h={h:.4f} in {t_h:.0f} ms, threads {ARGS.threads}")
    keys = [f"q{i}" for i in range(ARGS.pool)]
    true_p = rng.beta(0.6, 0.6, size=ARGS.pool)
    print("| B | calls | support (last) | predict ms | alloc rloo ms | alloc drgrpo ms | greedy rloo ms "
          "| update ms | total ms (predict+alloc+update) | alloc rloo / greedy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for B in (int(b) for b in ARGS.batches.split(",")):
        gp = PoolGP(h=h)
        gp.add(keys, E)
        times = {k: [] for k in ("pred", "rloo", "drgrpo", "greedy", "upd")}
        support = 0
        for call in range(ARGS.calls):
            idx = rng.choice(ARGS.pool, size=min(B, ARGS.pool), replace=False)
            batch = [keys[i] for i in idx]
            support = int(gp.seen.sum())
            m, t = ms(lambda: gp.predict_latent(batch))
            times["pred"].append(t)
            p = sigmoid(m)
            a = p * (1 - p)
            n, t = ms(lambda: allocate(a, 8 * B, 2, 32, "rloo"))
            times["rloo"].append(t)
            assert sum(n) == 8 * B
            _, t = ms(lambda: allocate(a, 8 * B, 3, 32, "drgrpo"))
            times["drgrpo"].append(t)
            g, t = ms(lambda: greedy_allocate(a, 8 * B, 2, 32, "rloo"))
            times["greedy"].append(t)
            assert g == n
            p_hat = rng.binomial(np.asarray(n), true_p[idx]) / np.asarray(n)
            _, t = ms(lambda: gp.update(batch, p_hat, m))
            times["upd"].append(t)
        mean = {k: float(np.mean(v)) for k, v in times.items()}
        total = mean["pred"] + mean["rloo"] + mean["upd"]
        print(f"| {B} | {ARGS.calls} | {support} | {mean['pred']:.1f} | {mean['rloo']:.1f} | {mean['drgrpo']:.1f} "
              f"| {mean['greedy']:.1f} | {mean['upd']:.1f} | {total:.1f} | {mean['rloo'] / mean['greedy']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
