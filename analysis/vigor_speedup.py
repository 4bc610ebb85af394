"""A Monte-Carlo check of VIGOR's speedup theorem (Theorem 2; the derivation in Appendix D.2 of
Jiang et al., arXiv 2607.22002) against its closed form.

The model: a prompt's reward variance u has a Pareto(k) tail above u_min (k > 1). VIGOR's round
i (i = 0 .. T-1) keeps the top alpha^i fraction of the batch by u and gives each kept prompt
gamma^i * m0 rollouts. The effective variance is the rollout-weighted mean of u, so

    eta = [sum_i gamma^i sum_{u in top alpha^i} u] / [sum_i gamma^i |top alpha^i|] / E[u]

and the GRPO-to-VIGOR timescale ratio is eta^(1/3) (Razin et al.'s inverse-cubic-root law,
D.2). The paper's closed form is Eq. 22: eta = sum_i (gamma alpha^(1-1/k))^i / sum_i (alpha
gamma)^i; with alpha gamma = 1, Eq. 26: ((alpha^(-1/k))^T - 1) / (T (alpha^(-1/k) - 1)). In the
compute-skew case alpha gamma > 1 the ratio scales as (alpha^(-1/k))^(T/3) times a constant
(Eq. 25).

The simulation draws the batch's variances, ranks them by their true value (the theorem's
idealisation: no estimation noise from m0 = 2 samples) and measures eta on the draw. The paper
gives no numeric value for the theorem; its empirical rollout-efficiency figure (2.3x fewer
rollouts to the target on Qwen2.5-3B, Figure 1) is printed beside it, which is a different
quantity (rollouts to an accuracy, not a timescale ratio under a model).

    python -m analysis.vigor_speedup            # the table, T = 4, m0 = 2, gamma = 2, alpha = 0.5
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

PAPER_EMPIRICAL = "2.3x fewer rollouts to the target accuracy (Qwen2.5-3B, VIGOR Figure 1 right)"


def _check(alpha: float, gamma: float, k: float, T: int) -> None:
    if not 0 < alpha < 1 or gamma <= 1 or T < 1:
        raise ValueError(f"need 0 < alpha < 1, gamma > 1, T >= 1 (got alpha={alpha}, gamma={gamma}, T={T})")
    if k <= 1:
        raise ValueError(f"Pareto shape k={k}: the theorem needs k > 1 (a finite mean variance)")


def eta_closed(alpha: float, gamma: float, k: float, T: int) -> float:
    """Eq. 22: the effective-variance amplification of VIGOR over GRPO."""
    _check(alpha, gamma, k, T)
    num = sum((gamma * alpha ** (1 - 1 / k)) ** i for i in range(T))
    return num / sum((alpha * gamma) ** i for i in range(T))


def eta_budget_conserving(alpha: float, k: float, T: int) -> float:
    """Eq. 26 (alpha gamma = 1): ((alpha^(-1/k))^T - 1) / (T (alpha^(-1/k) - 1))."""
    _check(alpha, 1 / alpha, k, T)
    r = alpha ** (-1 / k)
    return (r ** T - 1) / (T * (r - 1))


def speedup_closed(alpha: float, gamma: float, k: float, T: int) -> float:
    """tau_GRPO / tau_VIGOR = eta^(1/3) (Eqs. 4, 24)."""
    return eta_closed(alpha, gamma, k, T) ** (1 / 3)


def eta_of_draws(u: np.ndarray, alpha: float, gamma: float, T: int) -> np.ndarray:
    """eta measured on each row of ``u`` (batches x prompts of per-prompt variances): round i
    keeps the top round(alpha^i * prompts) of the row by u."""
    u = np.atleast_2d(u)
    s = -np.sort(-u, axis=1)
    csum = np.concatenate([np.zeros((s.shape[0], 1)), np.cumsum(s, axis=1)], axis=1)
    num, den = np.zeros(s.shape[0]), 0.0
    for i in range(T):
        n = max(1, int(round(alpha ** i * s.shape[1])))
        num += gamma ** i * csum[:, n]
        den += gamma ** i * n
    return num / den / s.mean(axis=1)


@dataclass(frozen=True)
class MonteCarlo:
    k: float
    eta: float          # mean over replicates
    eta_se: float       # standard error over replicates
    speedup: float      # mean of eta^(1/3) over replicates
    speedup_se: float
    reps: int
    prompts: int


def simulate(alpha: float, gamma: float, k: float, T: int, prompts: int = 200_000, reps: int = 20,
             seed: int = 0, u_min: float = 1.0) -> MonteCarlo:
    """``reps`` batches of ``prompts`` Pareto(k, u_min) variances; eta and eta^(1/3) per batch."""
    _check(alpha, gamma, k, T)
    rng = np.random.default_rng(seed)
    # at most ~4M draws per chunk: a paper-sized batch (160 prompts) is simulated many times over
    chunk = max(1, 4_000_000 // prompts)
    etas = np.concatenate([eta_of_draws(u_min * (1.0 + rng.pareto(k, (min(chunk, reps - r), prompts))), alpha, gamma, T)
                           for r in range(0, reps, chunk)])
    sp = etas ** (1 / 3)
    se = lambda x: float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan  # noqa: E731
    return MonteCarlo(k, float(etas.mean()), se(etas), float(sp.mean()), se(sp), reps, prompts)


KS = (1.1, 1.5, 2.0, 3.0, 5.0)


def table(ks=KS, alpha: float = 0.5, gamma: float = 2.0, T: int = 4,
          prompts: int = 200_000, reps: int = 20, seed: int = 0) -> list[dict]:
    """One row per Pareto shape k: the closed form beside the Monte-Carlo estimate."""
    rows = []
    for k in ks:
        mc = simulate(alpha, gamma, k, T, prompts, reps, seed)
        closed = speedup_closed(alpha, gamma, k, T)
        rows.append({"k": k, "alpha": alpha, "gamma": gamma, "T": T, "eta (Eq. 22)": eta_closed(alpha, gamma, k, T),
                     "eta (Monte Carlo)": mc.eta, "eta SE": mc.eta_se, "speedup (Eq. 4)": closed,
                     "speedup (Monte Carlo)": mc.speedup, "speedup SE": mc.speedup_se,
                     "rel. error": mc.speedup / closed - 1, "z": (mc.speedup - closed) / mc.speedup_se,
                     "batches x prompts": f"{reps} x {prompts}"})
    return rows


def skew_constant(alpha: float, gamma: float, k: float) -> float:
    """The T -> infinity limit of speedup / (alpha^(-1/k))^(T/3) for alpha gamma > 1, from Eq. 22's
    geometric sums: ((alpha gamma - 1) / (alpha gamma alpha^(-1/k) - 1))^(1/3) (Eq. 25's C^(1/3))."""
    _check(alpha, gamma, k, 1)
    if alpha * gamma <= 1:
        raise ValueError("the compute-skew case needs alpha * gamma > 1")
    ag = alpha * gamma
    return ((ag - 1) / (ag * alpha ** (-1 / k) - 1)) ** (1 / 3)


def skew_scaling(alpha: float = 0.5, gamma: float = 3.0, k: float = 1.5, Ts=(1, 2, 4, 8, 16, 32)) -> list[dict]:
    """Eq. 25: in the compute-skew case the ratio over (alpha^(-1/k))^(T/3) tends to a constant."""
    c = skew_constant(alpha, gamma, k)
    return [{"T": T, "speedup (Eq. 22)": speedup_closed(alpha, gamma, k, T),
             "speedup / (alpha^(-1/k))^(T/3)": speedup_closed(alpha, gamma, k, T) / alpha ** (-T / (3 * k)),
             "limit C^(1/3)": c} for T in Ts]


def markdown(rows: list[dict]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_markdown(index=False, floatfmt=".4g")


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-reps", type=int, default=20_000, help="batches per paper-sized batch row")
    a = ap.parse_args(argv)
    out = ["### VIGOR Theorem 2: closed form vs Monte Carlo (alpha gamma = 1, the paper's T=4, gamma=2, alpha=0.5)",
           "", f"Large batches ({a.reps} x {a.prompts} prompts): the closed form is the large-batch limit.", "",
           markdown(table(prompts=a.prompts, reps=a.reps, seed=a.seed)), "",
           "The paper's batch sizes (160 prompts for 1.5B/3B, 640 for 7B/Phi; Appendix C):", ""]
    rows = [{k: v for k, v in r.items() if k not in ("alpha", "gamma", "T", "eta (Eq. 22)", "eta (Monte Carlo)", "eta SE")}
            for b in (160, 640) for r in table(prompts=b, reps=a.batch_reps, seed=a.seed)]
    out += [markdown(rows), "",
           f"The paper's empirical rollout efficiency, a different quantity: {PAPER_EMPIRICAL}.", "",
           "### Eq. 25, the compute-skew case (alpha=0.5, gamma=3, k=1.5)", "", markdown(skew_scaling()), ""]
    text = "\n".join(out)
    print(text)
    return text


if __name__ == "__main__":
    main()
