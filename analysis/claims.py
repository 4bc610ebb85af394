"""The papers' qualitative claims as data, and a verdict for each on one sweep's results.

A claim compares a ``method`` with an ``other`` method on one measure, in a stated direction.
Evaluated on a sweep it is:

- **supported**: the 95 % interval of the effect lies entirely on the claimed side of zero;
- **contradicted**: it lies entirely on the other side;
- **inconclusive**: the interval contains zero, or the evidence is incomplete (said in ``note``):
  fewer than ``MIN_SEEDS`` training seeds, or a target reached by some seeds only;
- **not tested**: a method of the claim is not in the sweep (or the measure was not logged).

Measures and their intervals (``analysis.stats``):

- ``accuracy``: paired difference of held-out mean@k (method - other) over the same problems
  and training seeds; hierarchical bootstrap (training seeds, then problems).
- ``tokens_per_update``: paired difference of newly generated tokens per update (discarded
  rollouts included); bootstrap over training seeds, then update steps.
- ``rollouts_to_target``: paired difference of the rollouts each training seed needs until its
  smoothed validation accuracy reaches the target (``analysis.rollouts``; the target is the
  accuracy every seed of the tables' ``rollouts_baseline`` reaches); bootstrap over seeds.
  A method that never reaches it contradicts "fewer"; reached in some seeds only is inconclusive.
- ``variance_objective``: VIP's logged objective sum_i p_i(1-p_i) f(n_i) with its allocation
  minus the same with the uniform allocation, relative to uniform, per update; bootstrap
  over seeds, then steps. It is computed on the GP's *predicted* p, the quantity the
  allocation minimises, so it checks the implementation, not the realised gradient variance.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np

from analysis.stats import Estimate, accuracy_matrix, bootstrap_mean, paired_difference, seed_bootstrap

Kind = Literal["accuracy", "tokens_per_update", "rollouts_to_target", "variance_objective"]


@dataclass(frozen=True)
class Claim:
    paper: str
    id: str
    text: str
    kind: Kind
    method: str
    other: str                      # the method it is compared with ("uniform" for VIP's objective)
    direction: Literal["higher", "lower"]   # method vs other
    source: str


CLAIMS: tuple[Claim, ...] = (
    # not a paper's claim: the premise of every other one (RL training improves the policy)
    Claim("sanity", "grpo>base", "GRPO raises accuracy over the base policy", "accuracy", "grpo", "base",
          "higher", "sanity check (dags/sweeps/sanity.yaml)"),
    # VSR Table 1 (hard subset, mean@16) and its token accounting (Section 5)
    Claim("VSR", "vsr>grpo", "VSR beats GRPO on the hard subset", "accuracy", "vsr", "grpo", "higher",
          "VSR Table 1"),
    Claim("VSR", "vsr>static_prefix", "VSR beats static uniform expert-prefix resets", "accuracy", "vsr",
          "static_prefix", "higher", "VSR Table 1 / App. D.5"),
    Claim("VSR", "vsr>sft", "VSR beats SFT on the expert traces", "accuracy", "vsr", "sft", "higher",
          "VSR Table 1"),
    Claim("VSR", "no_scoring<vsr", "VSR without variance scoring is worse than VSR", "accuracy",
          "vsr_no_scoring", "vsr", "lower", "VSR Table 1 (ablation)"),
    Claim("VSR", "no_recency<vsr", "VSR without the recency rule is worse than VSR", "accuracy",
          "vsr_no_recency", "vsr", "lower", "VSR Table 1 (ablation)"),
    Claim("VSR", "vsr_tokens<grpo", "VSR generates fewer new tokens per update than GRPO",
          "tokens_per_update", "vsr", "grpo", "lower", "VSR Section 5 token accounting"),
    # VIGOR: rollouts to GRPO's accuracy (its figure, 2.3x) and Table 1 (every model)
    Claim("VIGOR", "vigor_rollouts<grpo", "VIGOR reaches GRPO's accuracy with fewer rollouts",
          "rollouts_to_target", "vigor", "grpo", "lower", "VIGOR efficiency figure"),
    Claim("VIGOR", "vigor>grpo", "VIGOR beats GRPO in accuracy", "accuracy", "vigor", "grpo", "higher",
          "VIGOR Table 1 (avg, all four models)"),
    # GRESO: skipping predicted zero-variance prompts saves rollouts against dynamic sampling
    Claim("GRESO", "greso_tokens<dapo", "GRESO generates fewer tokens per update than DAPO's dynamic sampling",
          "tokens_per_update", "greso", "dapo", "lower", "GRESO abstract (rollout speed-up)"),
    # DAPO: dynamic sampling regenerates until groups have signal
    Claim("DAPO", "dapo_tokens>grpo", "DAPO's dynamic sampling pays more generation per update than GRPO",
          "tokens_per_update", "dapo", "grpo", "higher", "DAPO dynamic sampling (arXiv 2503.14476)"),
    # VIP: its allocation lowers the gradient-variance objective vs the uniform allocation
    Claim("VIP", "vip_objective<uniform", "VIP's allocation lowers the variance objective vs uniform",
          "variance_objective", "vip", "uniform", "lower", "VIP Section 3 (allocation problem)"),
    Claim("VIP", "vip>grpo", "VIP beats uniform allocation in accuracy", "accuracy", "vip", "grpo", "higher",
          "VIP summary: RLOO+VIP over RLOO, Mean@32 +6.3"),
    Claim("RL-ZVP", "rl_zvp>grpo", "RL-ZVP beats GRPO in accuracy", "accuracy", "rl_zvp", "grpo", "higher",
          "RL-ZVP paper (main results)"),
)


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

    def row(self) -> dict[str, Any]:
        c = self.claim
        return {"paper": c.paper, "claim": c.text, "id": c.id, "measure": c.kind, "verdict": self.verdict,
                "effect": self.effect, "lo95": self.lo, "hi95": self.hi, "units": self.units,
                "seeds": self.seeds, "source": c.source, "note": self.note}


# A claim is about methods, not about one training run: with fewer training seeds than this the
# interval misses the run-to-run variation, so the verdict stays "inconclusive" whatever it shows.
MIN_SEEDS = 2


def _capped(v: Verdict) -> Verdict:
    if v.verdict in ("supported", "contradicted") and v.seeds < MIN_SEEDS:
        v.note = (v.note + "; " if v.note else "") + f"{v.seeds} training seed: would be {v.verdict}"
        v.verdict = "inconclusive"
    return v


def _decide(c: Claim, e: Estimate) -> str:
    sign = 1.0 if c.direction == "higher" else -1.0
    lo, hi = sorted((sign * e.lo, sign * e.hi))
    if lo > 0:
        return "supported"
    if hi < 0:
        return "contradicted"
    return "inconclusive"


def _per_step(runs, method: str, key: str) -> dict[Any, list[float]]:
    out: dict[Any, list[float]] = {}
    for s, h in runs:
        if s["method"] == method:
            vals = [float(r[key]) for r in sorted(h, key=lambda r: r["step"]) if key in r]
            if vals:
                out[s.get("seed")] = vals
    return out


def _matrix(by_seed: dict[Any, list[float]], seeds: Sequence) -> np.ndarray:
    n = min(len(by_seed[s]) for s in seeds)
    return np.array([by_seed[s][:n] for s in seeds], dtype=float)


def evaluate_claim(c: Claim, results: list[dict], runs: list, rollouts_target: float | None = None,
                   window: int = 3, eval_set: str | None = None, fraction: float = 1.0) -> Verdict:
    v = _evaluate(c, results, runs, rollouts_target, window, eval_set, fraction)
    return v if c.kind == "variance_objective" else _capped(v)


def _evaluate(c: Claim, results: list[dict], runs: list, rollouts_target: float | None,
              window: int, eval_set: str | None, fraction: float) -> Verdict:
    from analysis.tables import eval_set as set_of

    have = {r["method"] for r in results} | {s["method"] for s, _ in runs}
    missing = [m for m in (c.method, c.other) if m != "uniform" and m not in have]
    if missing:
        return Verdict(c, "not tested", note=f"not in the sweep: {', '.join(missing)}")
    if c.kind == "accuracy":
        # the held-out split when both methods were evaluated on it, else the first common benchmark
        common = sorted({set_of(r) for r in results if r["method"] == c.method}
                        & {set_of(r) for r in results if r["method"] == c.other}, key=lambda x: (x != "heldout", x))
        where = eval_set or (common[0] if common else None)
        A = [r for r in results if r["method"] == c.method and set_of(r) == where]
        R = [r for r in results if r["method"] == c.other and set_of(r) == where]
        if not A or not R:
            return Verdict(c, "not tested", note=f"no evaluation of both methods on {where or 'a common set'}")
        MA, _, uids = accuracy_matrix(A)
        MR, _, _ = accuracy_matrix(R, uids)
        e = paired_difference(MA, MR)
        return Verdict(c, _decide(c, e), e.mean, e.lo, e.hi, max(MA.shape[0], MR.shape[0]), "mean@k difference",
                       f"{where}, {e.problems} problems")
    if c.kind == "tokens_per_update":
        a, b = _per_step(runs, c.method, "tokens/generated"), _per_step(runs, c.other, "tokens/generated")
        seeds = sorted(set(a) & set(b), key=str)
        if not seeds:
            return Verdict(c, "not tested", note="no training seed run by both methods")
        MA, MB = _matrix(a, seeds), _matrix(b, seeds)
        n = min(MA.shape[1], MB.shape[1])
        e = paired_difference(MA[:, :n], MB[:, :n])
        ref = float(MB[:, :n].mean())
        return Verdict(c, _decide(c, e), e.mean, e.lo, e.hi, len(seeds), "tokens/update difference",
                       f"{e.mean / ref:+.1%} of {c.other}'s {ref:.0f} tokens/update over {n} updates")
    if c.kind == "rollouts_to_target":
        from analysis.rollouts import per_seed_rollouts, target_of
        try:
            t = target_of(runs, c.other, rollouts_target, fraction, window)
        except ValueError as err:
            return Verdict(c, "not tested", note=str(err))
        per = per_seed_rollouts(runs, t, window)
        a, b = per.get(c.method, {}), per.get(c.other, {})
        seeds = sorted(set(a) & set(b), key=str)
        if not seeds:
            return Verdict(c, "not tested", note="no training seed run by both methods")
        reach_a = sum(not math.isnan(a[s]) for s in seeds)
        reach_b = sum(not math.isnan(b[s]) for s in seeds)
        note = f"target {t:.3f}; reached {c.method} {reach_a}/{len(seeds)}, {c.other} {reach_b}/{len(seeds)}"
        if reach_a == 0 and reach_b > 0:
            return Verdict(c, "contradicted", seeds=len(seeds), units="rollouts difference", note=note)
        if reach_a < len(seeds) or reach_b < len(seeds):
            return Verdict(c, "inconclusive", seeds=len(seeds), units="rollouts difference", note=note)
        e = seed_bootstrap([a[s] - b[s] for s in seeds])
        return Verdict(c, _decide(c, e), e.mean, e.lo, e.hi, len(seeds), "rollouts difference", note)
    if c.kind == "variance_objective":
        obj, uni = _per_step(runs, c.method, "method/var_objective"), _per_step(runs, c.method,
                                                                                "method/var_objective_uniform")
        seeds = sorted(set(obj) & set(uni), key=str)
        if not seeds:
            return Verdict(c, "not tested", note=f"{c.method} runs log no method/var_objective")
        rel = {s: [(x - u) / u if u > 0 else 0.0 for x, u in zip(obj[s], uni[s])] for s in seeds}
        e = bootstrap_mean(_matrix(rel, seeds))
        return Verdict(c, _decide(c, e), e.mean, e.lo, e.hi, len(seeds), "relative objective change",
                       "on the GP-predicted pass rates (what the allocation minimises)")
    raise ValueError(f"claim {c.id}: unknown kind {c.kind!r}")


def evaluate_claims(results: list[dict], runs: list, claims: Sequence[Claim] = CLAIMS,
                    rollouts_target: float | None = None, window: int = 3, fraction: float = 1.0) -> list[Verdict]:
    return [evaluate_claim(c, results, runs, rollouts_target, window, fraction=fraction) for c in claims]


def claims_markdown(verdicts: list[Verdict], title: str = "Paper claims on this sweep") -> str:
    lines = [f"## {title}", "",
             "Verdict from the 95 % interval of the effect (method - other): supported / contradicted when "
             "it excludes zero on the claimed / opposite side, else inconclusive; \"not tested\" when a "
             "method is not in the sweep. Intervals: hierarchical bootstrap over training seeds, then "
             "problems (accuracy) or update steps (tokens); over seeds (rollouts).", "",
             "| paper | claim | verdict | effect [95% CI] | measure | seeds | note |",
             "|---|---|---|---|---|---|---|"]
    for v in verdicts:
        eff = "" if math.isnan(v.effect) else f"{v.effect:+.4g} [{v.lo:+.4g}, {v.hi:+.4g}]"
        lines.append(f"| {v.claim.paper} | {v.claim.text} | **{v.verdict}** | {eff} | {v.units or v.claim.kind} "
                     f"| {v.seeds or ''} | {v.note} |")
    counts = {k: sum(v.verdict == k for v in verdicts)
              for k in ("supported", "contradicted", "inconclusive", "not tested")}
    lines += ["", ", ".join(f"{k}: {n}" for k, n in counts.items()), ""]
    return "\n".join(lines)
