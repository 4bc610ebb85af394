"""PAIR's frozen-population estimator audit (arXiv 2608.11368's own check), printed.

A population of G prompts x K candidates with fixed rewards and fixed score-function
vectors; the prefix predictor tracks the rewards and wrong candidates cost more, so PAIR's
design continues correct candidates more often. Over many designs drawn from the same
continuation probabilities: the Horvitz-Thompson pair estimator's mean against the
complete-pair (all K completed) gradient, and the unweighted adaptive estimator's (RLOO over
the completed candidates). Same population and design as tests/methods/test_pair.py.

    .venv/bin/python bench/pair_audit.py [--draws 200000] [--seed 7]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from components.methods.pair import audit, pair_design, pair_weights  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    G, K, D = 6, 8, 3
    r = (rng.random((G, K)) < 0.4).astype(float)
    r[:, 0], r[:, 1] = 1.0, 0.0
    grads = rng.normal(size=(G, K, D))
    q = np.clip(0.25 + 0.5 * r + rng.normal(0, 0.05, (G, K)), 0.02, 0.98)
    cost = np.where(r > 0, 20.0, 60.0)
    pi = pair_design(pair_weights(q), cost, np.zeros((G, K), dtype=bool), 0.4 * cost.sum(), pi_min=0.1)
    a = audit(r, grads, pi, args.draws, rng)
    norm = np.linalg.norm(a["target"])
    print(f"population: {G} prompts x {K} candidates, {D}-d score vectors, {args.draws} designs")
    print(f"design: mean pi {pi.mean():.3f} (correct {pi[r > 0].mean():.3f}, wrong {pi[r == 0].mean():.3f}); "
          f"expected suffix cost {float((pi * cost).sum() / cost.sum()):.3f} of all")
    for name in ("ht", "unweighted"):
        m, se = a[f"{name}_mean"], a[f"{name}_se"]
        z = np.abs(m - a["target"]) / se
        print(f"{name:10s}  |mean - target| / |target| = {np.linalg.norm(m - a['target']) / norm:.4f}   "
              f"|z| max {z.max():.2f} median {np.median(z):.2f} over {z.size} coordinates")


if __name__ == "__main__":
    main()
