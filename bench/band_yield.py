"""How many fresh synthetic prompts of each level fall in a pass-rate band of the base policy?

Sizes a difficulty-band pool (the sanity sweep's ``filter_hard`` with ``min_pass``/``max_pass``):
for each chain length (level) draws ``n`` fresh problems (1-digit operands, as prepare_data),
samples ``k`` responses each from the base policy at T=1.0 and prints the mean pass rate and the
share of prompts whose pass rate lies in [lo, hi].

    .venv/bin/python bench/band_yield.py BASE_MODEL_ARTIFACT [--levels 4 5 6 7 8] [--n 64] [--k 16]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("--levels", type=int, nargs="+", default=[4, 5, 6, 7, 8])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--lo", type=float, default=0.2)
    ap.add_argument("--hi", type=float, default=0.8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    a = ap.parse_args()

    import numpy as np
    import torch

    from bench.rl_generalization import pass_rates
    from components.data.synthetic import generate_problems
    from components.stages.common import grade_fn, load_model

    torch.set_num_threads(1)
    model, tok = load_model(Path(a.base))
    grade = grade_fn()
    print(f"base policy {a.base}; {a.n} fresh problems per level, {a.k} samples each at T=1.0")
    print(f"| level | mean pass rate | share in [{a.lo}, {a.hi}] | share 0 | sampled in |")
    print("|---|---|---|---|---|")
    try:
        for lv in a.levels:
            probs = generate_problems(a.n, [lv], seed=99_000 + lv, operand_digits=1, source="band-yield")
            t0 = time.monotonic()
            r = np.asarray(pass_rates(model, tok, probs, grade, a.k, 1.0, a.max_new_tokens, seed=lv))
            band = float(np.mean((r >= a.lo - 1e-9) & (r <= a.hi + 1e-9)))
            print(f"| {lv} | {r.mean():.3f} | {band:.2f} | {float(np.mean(r == 0)):.2f} | "
                  f"{time.monotonic() - t0:.0f}s |", flush=True)
    finally:
        grade.grader.close()


if __name__ == "__main__":
    main()
