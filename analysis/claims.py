"""A verdict for each of the papers' claims (``analysis.paper_claims``) on one sweep's records.

A claim compares a ``method`` with an ``other`` method on one measure, in a stated direction.
Evaluated on a sweep it is:

- **supported**: the 95 % interval of the effect lies entirely on the claimed side of zero;
- **contradicted**: it lies entirely on the other side;
- **smaller than the paper's effect**: the interval contains zero but excludes the paper's
  effect scaled to this sweep (an equivalence-style test: an effect as large as the paper's is
  ruled out). Scaling (``PAPER_EFFECT_RULE``): the paper's relative effect
  (``Claim.paper_effect``: method / other - 1 on its benchmark average) times the ``other``
  method's measured mean on the judged set (a per-update measure: its mean per update); claims
  without a paper pair of numbers have none;
- **inconclusive**: the interval contains zero (and the paper's effect, where there is one), or
  the evidence is incomplete (said in ``note``): fewer than ``MIN_SEEDS`` training seeds, or a
  target reached by some seeds only -- the study cannot tell;
- **not tested**: a method of the claim is not in the sweep, the sweep is of the other setting
  (math / agentic) than the paper's claim, the runs do not share the estimator the claim needs,
  or the measure was not logged.

Measures and their intervals (``analysis.stats``):

- ``accuracy``: paired difference of mean@k (method - other) over the same problems and
  training seeds; hierarchical bootstrap (training seeds, then problems). Judged on the first
  set of ``JUDGED_SETS`` both methods were evaluated on (the embedded task's unfiltered
  benchmark before the hard held-out split, as the papers judge on their benchmarks), else the
  first common benchmark.
- ``tokens_per_update``: paired difference of newly generated tokens per update (discarded
  rollouts included); bootstrap over training seeds, then update steps.
- ``rollouts_per_update``: the same for the rollouts generated per update (``rollouts``).
- ``rollouts_to_target``: paired difference of the rollouts each training seed needs until its
  smoothed validation accuracy reaches the target (``analysis.rollouts``; the target is the
  accuracy every seed of the tables' ``rollouts_baseline`` reaches); bootstrap over seeds.
  A method that never reaches it contradicts "fewer"; reached in some seeds only is inconclusive.
- ``val_early`` / ``val_gain``: a claim about the shape of training (VSR's "w/o recency
  outperforms full VSR initially but plateaus thereafter"). Each seed's validation curve
  (after step 0) is cut into thirds; ``val_early`` is the mean of the first third,
  ``val_gain`` the mean of the last third minus that of the first. Effect: method - other per
  training seed, bootstrap over seeds.
- ``relative_gain_by_size``: (method - other) / other in mean@k per model, the smallest model's
  minus the largest's (model sizes read from the names, "1.5b"); hierarchical bootstrap, each
  model's training seeds then the problems.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from analysis.paper_claims import CLAIMS, Claim
from analysis.stats import (B_DEFAULT, RNG_SEED, Estimate, accuracy_matrix, pair_rows, paired_difference,
                            percentile_interval, replicate_means, run_key, seed_bootstrap, snap,
                            stratified_difference)

# the data (claims, their sources and the papers' numbers) is analysis.paper_claims; re-exported
__all__ = ["CLAIMS", "Claim", "Verdict", "VERDICTS", "SMALLER", "claims_markdown", "evaluate_claim",
           "evaluate_claims"]

SMALLER = "smaller than the paper's effect"
VERDICTS = ("supported", "contradicted", SMALLER, "inconclusive", "not tested")
# the notes of a "not tested" verdict whose claim this sweep cannot test at all
ABSENT_NOTES = ("not in the sweep", "the paper makes this claim in the")
# per-update measures: the training metric each reads and its unit
PER_UPDATE = {"tokens_per_update": ("tokens/generated", "tokens"), "rollouts_per_update": ("rollouts", "rollouts")}
PAPER_EFFECT_RULE = ("paper's relative effect (method / other - 1 on the paper's benchmark average) "
                     "x the other method's measured mean on the judged set")
JUDGED_SETS = ("arith_levels", "heldout")


@dataclass
class Verdict:
    claim: Claim
    verdict: str
    effect: float = math.nan
    lo: float = math.nan
    hi: float = math.nan
    seeds: int = 0
    units: str = ""
    note: str = ""
    # the paper's effect scaled to this sweep (PAPER_EFFECT_RULE), in the claimed direction
    paper_effect: float = math.nan

    def row(self) -> dict[str, Any]:
        c = self.claim
        return {"paper": c.paper, "claim": c.text, "id": c.id, "measure": c.kind, "verdict": self.verdict,
                "effect": self.effect, "lo95": self.lo, "hi95": self.hi, "units": self.units,
                "seeds": self.seeds, "paper_effect_rel": c.paper_effect, "paper_effect_here": self.paper_effect,
                "source": c.source, "paper_numbers": c.paper_numbers, "note": self.note}


# A claim is about methods, not about one training run: with fewer training seeds than this the
# interval misses the run-to-run variation, so the verdict stays "inconclusive" whatever it shows.
MIN_SEEDS = 2


def _capped(v: Verdict) -> Verdict:
    if v.verdict in ("supported", "contradicted", SMALLER) and v.seeds < MIN_SEEDS:
        v.note = (v.note + "; " if v.note else "") + f"{v.seeds} training seed: would be {v.verdict}"
        v.verdict = "inconclusive"
    return v


def _decide(c: Claim, e: Estimate, paper: float = math.nan) -> str:
    """The verdict from the interval; ``paper``: the paper's effect here (> 0, claimed direction)."""
    sign = 1.0 if c.direction == "higher" else -1.0
    lo, hi = sorted((sign * e.lo, sign * e.hi))
    if lo > 0:
        return "supported"
    if hi < 0:
        return "contradicted"
    if hi < paper:  # NaN (no paper effect) compares False
        return SMALLER
    return "inconclusive"


def _scaled_verdict(c: Claim, e: Estimate, other_mean: float, seeds: int, units: str, note: str) -> Verdict:
    """The verdict with the paper's effect scaled to ``other_mean`` (PAPER_EFFECT_RULE)."""
    paper = c.paper_effect * other_mean if c.paper_effect is not None else math.nan
    verdict = _decide(c, e, paper)
    sign = 1.0 if c.direction == "higher" else -1.0
    if verdict == "supported" and max(sign * e.lo, sign * e.hi) < paper:
        note += f"; the interval excludes the paper's effect here ({sign * paper:+.4g}): smaller"
    return Verdict(c, verdict, e.mean, e.lo, e.hi, seeds, units, note, sign * paper)


def _accuracy_verdict(c: Claim, A: list[dict], R: list[dict], where: str) -> Verdict:
    """Paired accuracy difference on ``where``; with several models, the mean over models of each
    model's paired difference (``stratified_difference``), as the papers average over models."""
    from analysis.paper import result_model
    models = sorted({result_model(r) for r in A} | {result_model(r) for r in R})
    blocks = []
    for m in models:
        Am, Rm = [r for r in A if result_model(r) == m], [r for r in R if result_model(r) == m]
        if not Am or not Rm:
            return Verdict(c, "not tested", note=f"{where}: {m}: no evaluation of {c.method if not Am else c.other}")
        MA, keys_a, uids = accuracy_matrix(Am)
        MR, keys_r, _ = accuracy_matrix(Rm, uids)
        try:
            blocks.append(pair_rows(MA, keys_a, MR, keys_r))
        except ValueError as err:
            return Verdict(c, "not tested", note=f"{where}: {c.method} vs {c.other}: {err}")
    seeds = max(max(MA.shape[0], MR.shape[0]) for MA, MR in blocks)
    other_mean = float(np.mean([MR.mean() for _, MR in blocks]))
    if len(blocks) == 1:
        e = paired_difference(*blocks[0])
        return _scaled_verdict(c, e, other_mean, seeds, "mean@k difference", f"{where}, {e.problems} problems")
    e = stratified_difference(blocks)
    return _scaled_verdict(c, e, other_mean, seeds, "mean@k difference, mean over models",
                           f"{where}, {len(blocks)} models, {e.problems} problems")


def _per_step(runs, method: str, key: str) -> dict[Any, list[float]]:
    out: dict[Any, list[float]] = {}
    for s, h in runs:
        if s["method"] == method:
            vals = [float(r[key]) for r in sorted(h, key=lambda r: r["step"]) if key in r]
            if vals:
                out[run_key(s)] = vals
    return out


def _matrix(by_seed: dict[Any, list[float]], seeds: Sequence) -> np.ndarray:
    n = min(len(by_seed[s]) for s in seeds)
    return np.array([by_seed[s][:n] for s in seeds], dtype=float)


def evaluate_claim(c: Claim, results: list[dict], runs: list, rollouts_target: float | None = None,
                   window: int = 3, eval_set: str | None = None, fraction: float = 1.0) -> Verdict:
    return _capped(_evaluate(c, results, runs, rollouts_target, window, eval_set, fraction))


def sweep_task(results: list[dict], runs: list) -> str:
    """``agentic`` when the sweep's records are episodes (their ``task``), else ``math``."""
    tasks = {r.get("task") for r in results} | {s.get("task") for s, _ in runs}
    return "agentic" if "agentic" in tasks else "math"


def _estimators(runs: list, method: str) -> set:
    return {s.get("adv_estimator") for s, _ in runs if s["method"] == method}


def _untestable(c: Claim, results: list[dict], runs: list) -> str | None:
    have = {r["method"] for r in results} | {s["method"] for s, _ in runs}
    missing = [m for m in (c.method, c.other) if m not in have]
    if missing:
        return f"not in the sweep: {', '.join(missing)}" + (f" (needs {c.needs})" if c.needs else "")
    task = sweep_task(results, runs)
    if c.task is not None and c.task != task:
        return f"the paper makes this claim in the {c.task} setting; this sweep is {task}"
    if c.same_estimator:
        a, b = _estimators(runs, c.method), _estimators(runs, c.other)
        if not runs or None in a | b:
            return "the runs do not record their advantage estimator (summary.json adv_estimator)"
        if a != b:
            return f"different estimators: {c.method} {sorted(a)}, {c.other} {sorted(b)} (the paper compares like with like)"
    return None


def _common_set(c: Claim, results: list[dict], eval_set: str | None) -> str | None:
    """The held-out split when both methods were evaluated on it, else the first common benchmark."""
    from analysis.tables import eval_set as set_of
    rank = {s: i for i, s in enumerate(JUDGED_SETS)}
    common = sorted({set_of(r) for r in results if r["method"] == c.method}
                    & {set_of(r) for r in results if r["method"] == c.other},
                    key=lambda x: (rank.get(x, len(rank)), x))
    return eval_set or (common[0] if common else None)


def _evaluate(c: Claim, results: list[dict], runs: list, rollouts_target: float | None,
              window: int, eval_set: str | None, fraction: float) -> Verdict:
    from analysis.tables import eval_set as set_of

    why = _untestable(c, results, runs)
    if why:
        return Verdict(c, "not tested", note=why)
    if c.kind in ("accuracy", "relative_gain_by_size"):
        where = _common_set(c, results, eval_set)
        A = [r for r in results if r["method"] == c.method and set_of(r) == where]
        R = [r for r in results if r["method"] == c.other and set_of(r) == where]
        if not A or not R:
            return Verdict(c, "not tested", note=f"no evaluation of both methods on {where or 'a common set'}")
        if c.kind == "relative_gain_by_size":
            return _relative_gain_by_size(c, A, R, where)
        return _accuracy_verdict(c, A, R, where)
    if c.kind in PER_UPDATE:
        key, what = PER_UPDATE[c.kind]
        a, b = _per_step(runs, c.method, key), _per_step(runs, c.other, key)
        seeds = sorted(set(a) & set(b), key=str)
        if not seeds:
            return Verdict(c, "not tested", note="no training seed run by both methods")
        MA, MB = _matrix(a, seeds), _matrix(b, seeds)
        n = min(MA.shape[1], MB.shape[1])
        e = paired_difference(MA[:, :n], MB[:, :n])
        ref = float(MB[:, :n].mean())
        return _scaled_verdict(c, e, ref, len(seeds), f"{what}/update difference",
                               f"{e.mean / ref:+.1%} of {c.other}'s {ref:.0f} {what}/update over {n} updates")
    if c.kind in ("val_early", "val_gain"):
        return _val_shape(c, runs)
    if c.kind == "rollouts_to_target":
        from analysis.rollouts import per_model_rollouts
        try:
            per, targets = per_model_rollouts(runs, c.other, rollouts_target, fraction, window)
        except ValueError as err:
            return Verdict(c, "not tested", note=str(err))
        a, b = per.get(c.method, {}), per.get(c.other, {})
        seeds = sorted(set(a) & set(b), key=str)
        if not seeds:
            return Verdict(c, "not tested", note="no training seed run by both methods")
        reach_a = sum(not math.isnan(a[s]) for s in seeds)
        reach_b = sum(not math.isnan(b[s]) for s in seeds)
        target = (f"target {next(iter(targets.values())):.3f}" if len(targets) == 1 else
                  "targets " + ", ".join(f"{m} {t:.3f}" for m, t in targets.items()))
        note = f"{target}; reached {c.method} {reach_a}/{len(seeds)}, {c.other} {reach_b}/{len(seeds)}"
        if reach_a == 0 and reach_b > 0:
            return Verdict(c, "contradicted", seeds=len(seeds), units="rollouts difference", note=note)
        if reach_a < len(seeds) or reach_b < len(seeds):
            return Verdict(c, "inconclusive", seeds=len(seeds), units="rollouts difference", note=note)
        e = seed_bootstrap([a[s] - b[s] for s in seeds])
        return Verdict(c, _decide(c, e), e.mean, e.lo, e.hi, len(seeds), "rollouts difference", note)
    raise ValueError(f"claim {c.id}: unknown kind {c.kind!r}")


def val_windows(hist: list[dict]) -> tuple[float, float, int]:
    """(mean validation accuracy of the first third, of the last third, points) of one run's
    curve after step 0 (step 0 is the untrained policy, the same for every method)."""
    pts = [float(h["val/accuracy"]) for h in sorted(hist, key=lambda h: h["step"])
           if "val/accuracy" in h and h["step"] > 0]
    if len(pts) < 3:
        return math.nan, math.nan, len(pts)
    k = len(pts) // 3
    return float(np.mean(pts[:k])), float(np.mean(pts[-k:])), len(pts)


def _val_shape(c: Claim, runs: list) -> Verdict:
    per: dict[str, dict[Any, float]] = {c.method: {}, c.other: {}}
    for s, h in runs:
        if s["method"] in per:
            early, late, _ = val_windows(h)
            if not math.isnan(early):
                per[s["method"]][run_key(s)] = early if c.kind == "val_early" else late - early
    seeds = sorted(set(per[c.method]) & set(per[c.other]), key=str)
    if not seeds:
        return Verdict(c, "not tested", note="no training seed of both methods with >= 3 validations after step 0")
    e = seed_bootstrap([per[c.method][s] - per[c.other][s] for s in seeds])
    what = "first-third accuracy" if c.kind == "val_early" else "last-third minus first-third accuracy"
    return Verdict(c, _decide(c, e), e.mean, e.lo, e.hi, len(seeds), f"{what} difference",
                   "validation curve after step 0 in thirds")


def model_size(name: str) -> float:
    """Billions of parameters from a model name ('qwen2.5-math-1.5b' -> 1.5, 'smollm2-135m' ->
    0.135); raises if absent."""
    import re
    m = re.findall(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)([bm])(?![a-z])", name.lower())
    if not m:
        raise ValueError(f"no model size (e.g. '1.5b', '135m') in the model name {name!r}")
    value, unit = m[-1]
    return float(value) / (1000.0 if unit == "m" else 1.0)


def _relative_gain_by_size(c: Claim, A: list[dict], R: list[dict], where: str) -> Verdict:
    """(method / other - 1) on the smallest model minus the same on the largest. Each replicate
    resamples, per model, its training seeds (a seed's two rows stay paired, as in
    ``paired_difference``) and then the problems; problems are resampled jointly across the
    models when both were evaluated on the same problems (what the problems share cancels), the
    two models' seeds independently (separate training runs)."""
    from analysis.paper import result_model
    by: dict[str, tuple[list, list]] = {}
    for r in A:
        by.setdefault(result_model(r), ([], []))[0].append(r)
    for r in R:
        by.setdefault(result_model(r), ([], []))[1].append(r)
    both = {m: ar for m, ar in by.items() if ar[0] and ar[1]}
    if len(both) < 2:
        return Verdict(c, "not tested", note=f"needs both methods on >= 2 model sizes (have {sorted(both) or 'none'})")
    try:
        sizes = {m: model_size(m) for m in both}
    except ValueError as err:
        return Verdict(c, "not tested", note=str(err))
    small, large = min(sizes, key=sizes.get), max(sizes, key=sizes.get)
    mats = {}
    for m in (small, large):
        MA, keys_a, uids = accuracy_matrix(both[m][0])
        MR, keys_r, _ = accuracy_matrix(both[m][1], uids)
        if any(sd is None for _, sd in keys_a + keys_r):
            return Verdict(c, "not tested", note=f"{m}: {c.method} vs {c.other}: a method without training seeds")
        try:
            MA, MR = pair_rows(MA, keys_a, MR, keys_r)
        except ValueError as err:
            return Verdict(c, "not tested", note=f"{m}: {c.method} vs {c.other}: {err}")
        mats[m] = (MA, MR, uids)
    rng = np.random.default_rng(RNG_SEED)
    b = B_DEFAULT
    shared = mats[small][2] == mats[large][2]
    joint = rng.integers(0, len(mats[small][2]), size=(b, len(mats[small][2]))) if shared else None

    def rel(model: str) -> np.ndarray:
        MA, MR, uids = mats[model]
        si = rng.integers(0, MA.shape[0], size=(b, MA.shape[0]))
        pi = joint if shared else rng.integers(0, len(uids), size=(b, len(uids)))
        a, r = replicate_means(MA, si, pi), replicate_means(MR, si, pi)
        return np.concatenate([[MA.mean() / MR.mean() - 1], a / np.maximum(r, 1e-12) - 1])

    d = rel(small) - rel(large)
    scale = float(np.abs(d).max())
    lo, hi = percentile_interval(d[1:], scale)
    e = Estimate(snap(d[0], scale), lo, hi, 0, 0)
    seeds = min(mats[m][0].shape[0] for m in (small, large))
    return Verdict(c, _decide(c, e), e.mean, e.lo, e.hi, seeds, "relative-gain difference (smaller - larger model)",
                   f"{where}: {small} vs {large}")


def evaluate_claims(results: list[dict], runs: list, claims: Sequence[Claim] = CLAIMS,
                    rollouts_target: float | None = None, window: int = 3, fraction: float = 1.0,
                    eval_set: str | None = None) -> list[Verdict]:
    return [evaluate_claim(c, results, runs, rollouts_target, window, eval_set, fraction) for c in claims]


def claims_markdown(verdicts: list[Verdict], title: str = "Paper claims on this sweep") -> str:
    lines = [f"## {title}", "",
             "Verdict from the 95 % interval of the effect (method - other): supported / contradicted when "
             "it excludes zero on the claimed / opposite side; smaller than the paper's effect when it "
             "contains zero but excludes the paper's effect here (the " + PAPER_EFFECT_RULE + "); else "
             "inconclusive; \"not tested\" when a "
             "method is not in the sweep or the claim is about the other setting. Intervals: hierarchical "
             "bootstrap over training seeds, then problems (accuracy) or update steps (tokens); over seeds "
             "(rollouts, validation windows). Source: where the paper says it (the seeds' text).", "",
             "| paper | claim | verdict | effect [95% CI] | paper's effect here | measure | seeds | paper's numbers "
             "| source | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    # a claim whose methods or setting the sweep does not hold is listed by id under the table,
    # not as a row: a small sweep's table then shows what it tested
    absent = [v for v in verdicts if v.verdict == "not tested" and v.note.startswith(ABSENT_NOTES)]
    for v in verdicts:
        if v in absent:
            continue
        eff = "" if math.isnan(v.effect) else f"{v.effect:+.4g} [{v.lo:+.4g}, {v.hi:+.4g}]"
        paper = "" if math.isnan(v.paper_effect) else f"{v.paper_effect:+.4g} ({v.claim.paper_effect:+.1%})"
        lines.append(f"| {v.claim.paper} | {v.claim.text} | **{v.verdict}** | {eff} | {paper} | {v.units or v.claim.kind} "
                     f"| {v.seeds or ''} | {v.claim.paper_numbers or 'not in the text'} | {v.claim.source} | {v.note} |")
    counts = {k: sum(v.verdict == k for v in verdicts) for k in VERDICTS}
    lines += [""]
    if absent:
        lines += [f"Not tested, a method or the setting not in this sweep ({len(absent)}): "
                  + ", ".join(f"`{v.claim.id}`" for v in absent) + ".", ""]
    lines += [", ".join(f"{k}: {n}" for k, n in counts.items()), ""]
    return "\n".join(lines)
