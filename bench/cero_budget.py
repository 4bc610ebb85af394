"""CERO's budget dynamics on frozen populations: how its dual updates spend a global budget.

P prompts with fixed pass rates .02 ... .5 are revisited every epoch (B per step, 60 steps);
each step CERO allocates, the outcomes are drawn from the pass rates, and it observes them.
Printed per configuration: the run's spend / its budget, the per-step spread (std of the last
20 steps' spend / rho) and how much more the easiest-to-learn quarter (p near .5) got than
the hardest quarter. The defaults are the first row.

    .venv/bin/python bench/cero_budget.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from components.methods.base import Group  # noqa: E402
from components.methods.registry import build  # noqa: E402

CONFIGS = [
    ("defaults (kappa 16, path gradient, band .25)", {}),
    ("per-step gradient (spend - rho)", {"lambda_gradient": "step"}),
    ("no band", {"step_band": 10.0}),
    ("no band, per-step gradient", {"step_band": 10.0, "lambda_gradient": "step"}),
    ("kappa 8", {"kappa": 8.0}),
]


def run(P: int, B: int, cfg: dict, steps: int = 60) -> tuple[float, float, float]:
    m = build("cero", {"n_mean": 8, **cfg})
    p = {f"q{i:03d}": 0.02 + 0.48 * i / (P - 1) for i in range(P)}
    uids, rng, spends, per = sorted(p), np.random.default_rng(0), [], {u: 0 for u in p}
    for step in range(steps):
        batch = [uids[(B * step + j) % P] for j in range(B)]
        ns = m.plan(batch)
        m.observe([Group(uid=u, problem_uid=u, answer="0", context_ids=(1,), prompt_len=1, responses=[(5,)] * n,
                         texts=[""] * n, rewards=[float(rng.random() < p[u]) for _ in range(n)])
                   for u, n in zip(batch, ns)])
        spends.append(sum(ns))
        for u, n in zip(batch, ns):
            per[u] += n
    k, rho = P // 4, 8 * B
    return (float(np.mean(spends)) / rho, float(np.std(spends[-20:])) / rho,
            sum(per[u] for u in uids[-k:]) / max(sum(per[u] for u in uids[:k]), 1))


def main() -> None:
    print(f"{'configuration':48s} {'prompts x batch':>15s} {'spend/budget':>12s} {'step spread':>11s} "
          f"{'mid/hard':>8s}")
    for label, cfg in CONFIGS:
        for P, B in ((24, 8), (100, 16)):
            spend, spread, ratio = run(P, B, cfg)
            print(f"{label:48s} {f'{P} x {B}':>15s} {spend:12.3f} {spread:11.3f} {ratio:8.2f}")


if __name__ == "__main__":
    main()
