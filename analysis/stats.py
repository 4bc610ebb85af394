"""Uncertainty for the sweep's tables: a hierarchical bootstrap over training seeds and
problems.

What varies between two runs of a sweep is the training seed (batch order, sampling) and
which problems happen to be in the held-out set; both go into the interval. One replicate
resamples the training seeds with replacement, then -- independently -- the problems with
replacement, and takes the mean of the per-problem accuracies over the resampled
(seed, problem) cells. The 95 % interval is the 2.5 / 97.5 percentile of B replicates
(percentile bootstrap). A paired difference applies the SAME resampled seeds and problems to
both methods (seed s of a method is paired with seed s of the reference: same batch order and
sampling seeds), so what the two share cancels. With one training seed the interval covers
the problem sample only; ``seeds`` says how many there were. The bootstrap's own RNG is
fixed, so a table is a function of the results.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

B_DEFAULT = 2000
RNG_SEED = 20261130
# A bound that is zero in exact arithmetic can come out of a float sum as -1e-17; a verdict
# ("the interval excludes zero") must not turn on that: values within this share of the data's
# largest magnitude of zero are zero. A real bound of an accuracy difference is at least
# 1/(seeds x problems x samples) from zero, far above this.
ROUNDING = 1e-9


@dataclass(frozen=True)
class Estimate:
    mean: float
    lo: float
    hi: float
    seeds: int
    problems: int

    def fmt(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def snap(x: float, scale: float) -> float:
    """``x``, or 0.0 where it is within float rounding of zero at ``scale`` (ROUNDING)."""
    return 0.0 if abs(x) <= ROUNDING * scale else float(x)


def percentile_interval(reps: np.ndarray, scale: float) -> tuple[float, float]:
    """The 2.5 / 97.5 percentiles of bootstrap replicates, snapped to zero at ``scale``."""
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return snap(lo, scale), snap(hi, scale)


def accuracy_matrix(results: list[dict], problems: list[str] | None = None) -> tuple[np.ndarray, list, list[str]]:
    """(rows x problems) per-problem accuracy of one method's evaluate results, one row per
    (model, training seed), rows in that order; the row keys; columns ``problems`` (default:
    the first result's problem order). Two methods' matrices pair row by row only when their
    keys pair (``pair_rows``). Raises if a result lacks ``per_problem`` or a problem
    (different held-out sets are not comparable)."""
    from analysis.paper import result_model
    if not results:
        raise ValueError("accuracy_matrix: no results")

    def key(r: dict) -> tuple[str, Any]:
        return result_model(r), r.get("train_seed")

    rows = sorted(results, key=lambda r: (key(r)[0], r.get("train_seed") is None, r.get("train_seed") or 0))
    for r in rows:
        if "per_problem" not in r:
            raise ValueError(f"evaluate result '{r.get('label')}' has no per_problem accuracies "
                             "(written by evaluate since the budget/uncertainty change): rerun its evaluate stage")
    uids = list(problems if problems is not None else rows[0]["per_problem"])
    try:
        A = np.array([[r["per_problem"][u] for u in uids] for r in rows], dtype=float)
    except KeyError as e:
        raise ValueError(f"evaluate results are on different problem sets (no {e.args[0]!r} in one of them)") from None
    return A, [key(r) for r in rows], uids


def pair_rows(A: np.ndarray, keys_a: list, R: np.ndarray, keys_r: list) -> tuple[np.ndarray, np.ndarray]:
    """``A`` and ``R`` (``accuracy_matrix``) with their rows aligned by (model, training seed). A
    side whose model has one row without a training seed (the base policy) pairs that row with
    every row of the other side's same model. Raises ValueError naming the rows that have no
    partner."""
    pairs, unpaired = [], []
    for model in dict.fromkeys(k[0] for k in keys_a + keys_r):
        a = [i for i, k in enumerate(keys_a) if k[0] == model]
        r = [j for j, k in enumerate(keys_r) if k[0] == model]
        if len(a) == 1 and keys_a[a[0]][1] is None and r:
            pairs += [(a[0], j) for j in r]
        elif len(r) == 1 and keys_r[r[0]][1] is None and a:
            pairs += [(i, r[0]) for i in a]
        else:
            in_r = {keys_r[j]: j for j in r}
            pairs += [(i, in_r[keys_a[i]]) for i in a if keys_a[i] in in_r]
            unpaired += sorted({keys_a[i] for i in a} ^ set(in_r), key=str)
    if unpaired or not pairs:
        raise ValueError(f"rows not paired by (model, training seed): {unpaired} on one side only")
    return A[[i for i, _ in pairs]], R[[j for _, j in pairs]]


def run_key(summary: dict) -> tuple:
    """A training run's pairing key: (model, training seed). ``model`` is set by the tables
    stage from the run's grid cell; runs of one model pair by seed alone."""
    return summary.get("model"), summary.get("seed")


def replicate_means(A: np.ndarray, si: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """One mean per replicate k: rows ``si[k]`` (seeds) and columns ``pi[k]`` (problems) of ``A``."""
    # mean over the resampled cells = mean over resampled seeds of (mean over resampled problems)
    # per seed row, computed per replicate without materialising (b, S, P) at once
    out = np.empty(len(si))
    for k in range(len(si)):
        out[k] = A[si[k]][:, pi[k]].mean()
    return out


def bootstrap_mean(A: np.ndarray, b: int = B_DEFAULT, seed: int = RNG_SEED) -> Estimate:
    """Mean of a (seeds x problems) matrix with its hierarchical-bootstrap 95 % interval."""
    A = np.asarray(A, dtype=float)
    if A.ndim != 2 or A.size == 0:
        raise ValueError(f"bootstrap_mean: need a non-empty seeds x problems matrix, got shape {A.shape}")
    rng, (S, P) = np.random.default_rng(seed), A.shape
    si, pi = rng.integers(0, S, size=(b, S)), rng.integers(0, P, size=(b, P))
    scale = float(np.abs(A).max())
    lo, hi = percentile_interval(replicate_means(A, si, pi), scale)
    return Estimate(snap(A.mean(), scale), lo, hi, A.shape[0], A.shape[1])


def paired_difference(A: np.ndarray, R: np.ndarray, b: int = B_DEFAULT, seed: int = RNG_SEED) -> Estimate:
    """mean(A) - mean(R) over the same problems (columns) and training seeds (rows), with the
    hierarchical-bootstrap interval of the paired difference. A reference with one row (the
    base policy: no training seed) is paired with every seed of A; otherwise both must have
    the same number of seeds."""
    A, R = np.asarray(A, dtype=float), np.asarray(R, dtype=float)
    if A.shape[1] != R.shape[1]:
        raise ValueError(f"paired_difference: different problem counts ({A.shape[1]} vs {R.shape[1]})")
    if R.shape[0] == 1 and A.shape[0] > 1:
        R = np.repeat(R, A.shape[0], axis=0)
    elif A.shape[0] == 1 and R.shape[0] > 1:
        A = np.repeat(A, R.shape[0], axis=0)
    if A.shape[0] != R.shape[0]:
        raise ValueError(f"paired_difference: different seed counts ({A.shape[0]} vs {R.shape[0]})")
    return bootstrap_mean(A - R, b, seed)


def stratified_difference(blocks: list[tuple[np.ndarray, np.ndarray]], b: int = B_DEFAULT,
                          seed: int = RNG_SEED) -> Estimate:
    """The mean over blocks (models) of each block's paired difference mean(A) - mean(R), with a
    bootstrap that resamples each block's seeds and problems on its own (each model has its own
    runs, and its own held-out problems): the papers' average over models, each weighted
    equally. Rows of A and R already paired (``pair_rows``)."""
    rng = np.random.default_rng(seed)
    diffs = [np.asarray(A, dtype=float) - np.asarray(R, dtype=float) for A, R in blocks]
    reps = np.zeros(b)
    for D in diffs:
        si, pi = rng.integers(0, D.shape[0], size=(b, D.shape[0])), rng.integers(0, D.shape[1], size=(b, D.shape[1]))
        reps += replicate_means(D, si, pi)
    reps /= len(diffs)
    point = float(np.mean([D.mean() for D in diffs]))
    scale = float(max(np.abs(D).max() for D in diffs))
    lo, hi = percentile_interval(reps, scale)
    return Estimate(snap(point, scale), lo, hi, sum(D.shape[0] for D in diffs), sum(D.shape[1] for D in diffs))


def seed_bootstrap(values, b: int = B_DEFAULT, seed: int = RNG_SEED) -> Estimate:
    """Mean of per-seed values with the percentile-bootstrap interval over seeds (one value
    per training seed: token counts, rollouts to target). One seed: the interval is the point."""
    v = np.asarray([x for x in values], dtype=float)
    if v.size == 0 or np.isnan(v).any():
        raise ValueError("seed_bootstrap: need finite per-seed values")
    idx = np.random.default_rng(seed).integers(0, v.size, size=(b, v.size))
    scale = float(np.abs(v).max())
    lo, hi = percentile_interval(v[idx].mean(axis=1), scale)
    return Estimate(snap(v.mean(), scale), lo, hi, int(v.size), 0)
