"""The VSR paper's checks of its state score, on a policy and a hard subset of this project
(seed 000, Appendix D.5 and Figure 7), each printed beside the paper's numbers.

- **Figure 7, truncated expert traces**: every problem with an expert trace, the trace cut at
  alpha in {0, 25, 50, 75, 100} % of its tokens, ``n`` continuations from each cut; the mean and
  the 25-75 percentile range of the per-problem success rate per alpha, and a least-squares line
  through the means (the paper: the mean rises about linearly from ~0 to ~1, the spread widest
  in the middle).
- **D.5, sigma-hat validation**: problems whose first group of ``n`` samples is mixed; one of
  that group's successes per problem, cut at 25 / 50 / 75 %; ``n`` continuations per cut. The
  predicted continuation standard deviation sigma-hat(p0, alpha) against the empirical one
  sqrt(p (1 - p)): Pearson and Spearman correlation, pooled and at each position, with 95 %
  bootstrap intervals over problems (the paper, Qwen2.5-7B-Instruct: pooled Pearson 0.441
  [0.277, 0.591]).
- **D.5, failed vs successful prefixes**: on the same problems, one failed sample of the first
  group cut at the same positions: the mean continuation success and the share of all-fail
  continuation groups per position, beside the successful prefixes' all-fail share.

    python -m analysis.vsr_states --model <pretrain or train artifact> --hard <filter_hard artifact> --out DIR

A continuation is graded as the trainer grades a replayed prefix's continuation: the prefix's
text plus the generated text (``RolloutContext.sample_groups``).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
POSITIONS = (0.25, 0.5, 0.75)
PAPER = {   # seed 000 (VSR), Appendix D.5 and Figure 7, Qwen2.5-7B-Instruct
    "figure7": "mean success rises about linearly in alpha from ~0 at 0 % to ~1 at 100 %; "
               "the interquartile spread is widest near the middle",
    "pearson_pooled": (0.441, 0.277, 0.591), "spearman_pooled": (0.433, 0.270, 0.585),
    "pearson_by_position": (0.446, 0.387, 0.342), "spearman_by_position": (0.494, 0.305, 0.329),
    "failed_success": (0.396, 0.260, 0.130), "failed_all_fail": (0.26, 0.42, 0.62),
    "successful_all_fail": (0.0, 0.02, 0.04),
}


# the D.5 prefix comparisons: key of the checks (and of PAPER), what it measures
PREFIX_ROWS = (("failed_success", "failed prefixes: continuation success"),
               ("failed_all_fail", "failed prefixes: all-fail groups"),
               ("successful_all_fail", "successful prefixes: all-fail groups"))


class TooFewMixed(ValueError):
    """The policy's first groups are too rarely mixed for the sigma-hat validation."""


# ------------------------------------------------------------------ statistics
def _rank(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (Spearman's convention)."""
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(len(x), dtype=float)
    for v in np.unique(x):
        tie = x == v
        r[tie] = r[tie].mean()
    return r


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return float("nan")   # undefined: a constant side carries no association
    return float(np.corrcoef(x, y)[0, 1])


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    return pearson(_rank(np.asarray(x, float)), _rank(np.asarray(y, float)))


def correlation_ci(x, y, groups, fn, b: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(estimate, 2.5 %, 97.5 %): ``fn`` over the pairs, bootstrap resampling the ``groups``
    (problems), so the states of one problem move together. NaN replicates are dropped."""
    x, y, groups = np.asarray(x, float), np.asarray(y, float), np.asarray(groups)
    ids = np.unique(groups)
    rows = {g: np.flatnonzero(groups == g) for g in ids}
    rng = np.random.default_rng(seed)
    reps = []
    for _ in range(b):
        idx = np.concatenate([rows[g] for g in rng.choice(ids, size=len(ids), replace=True)])
        reps.append(fn(x[idx], y[idx]))
    reps = np.array([r for r in reps if not math.isnan(r)])
    lo, hi = (np.quantile(reps, [0.025, 0.975]) if len(reps) else (float("nan"), float("nan")))
    return fn(x, y), float(lo), float(hi)


def curve_summary(rates: dict[float, Sequence[float]]) -> dict:
    """Per alpha: mean, 25th and 75th percentile of the per-problem success rates; the
    least-squares line through the means, its R^2 and largest absolute residual."""
    a = np.array(sorted(rates), float)
    means = np.array([np.mean(rates[x]) for x in a])
    slope, icept = np.polyfit(a, means, 1)
    fit = slope * a + icept
    ss = float(((means - means.mean()) ** 2).sum())
    return {"alphas": a.tolist(), "mean": means.tolist(),
            "q25": [float(np.quantile(rates[x], 0.25)) for x in a],
            "q75": [float(np.quantile(rates[x], 0.75)) for x in a],
            "slope": float(slope), "intercept": float(icept),
            "r2": float(1 - ((means - fit) ** 2).sum() / ss) if ss > 0 else float("nan"),
            "max_residual": float(np.abs(means - fit).max()), "problems": len(rates[a[0]])}


# ------------------------------------------------------------------ rollouts
def _cut(ids: Sequence[int], alpha: float) -> int:
    return int(round(alpha * len(ids)))


def _success(groups) -> list[float]:
    return [float(np.mean(g.rewards)) for g in groups]


def truncation_curve(ctx, problems, n: int = 8, alphas: Sequence[float] = ALPHAS) -> dict:
    """Figure 7: continuation success from the expert trace cut at each alpha."""
    tok, eos = ctx.engine.tokenizer, getattr(ctx.engine.tokenizer, "eos_token_id", None)
    with_trace = [p for p in problems if p.traces]
    if not with_trace:
        raise ValueError("vsr_states: no problem of the hard subset has an expert trace (Figure 7 needs them)")
    traces = {p.uid: [t for t in tok.encode(p.traces[0], add_special_tokens=False) if t != eos] for p in with_trace}
    rates = {}
    for a in alphas:
        items = [ctx.replay_item(p, traces[p.uid], _cut(traces[p.uid], a)) for p in with_trace]
        rates[a] = _success(ctx.sample_groups(items, n, purpose="probe"))
    return curve_summary(rates)


def prefix_checks(ctx, problems, n: int = 16, positions: Sequence[float] = POSITIONS, b: int = 2000,
                  max_mixed: int | None = None) -> dict:
    """D.5: the sigma-hat validation on successful prefixes and the failed-prefix comparison, on
    the first ``max_mixed`` (all when None) of ``problems`` whose first group is mixed: the paper
    selects problems with mixed initial outcomes, which a hard subset holds few of, so the
    first groups scan all of ``problems``."""
    from components.methods.vsr import sigma_hat

    eos = getattr(ctx.engine.tokenizer, "eos_token_id", None)
    first = ctx.sample_groups(ctx.prompt_items(problems), n, purpose="probe")
    mixed = [(p, g) for p, g in zip(problems, first) if g.mixed][:max_mixed]
    if len(mixed) < 3:
        raise TooFewMixed(f"vsr_states: {len(mixed)} of {len(problems)} problems have a mixed first group of {n} "
                         "samples; the sigma-hat validation needs at least 3 (use a policy that solves some)")
    out = {"problems": len(problems), "mixed": len(mixed)}
    rows = {}
    for kind, pick in (("successful", lambda g: max(i for i, r in enumerate(g.rewards) if r > 0.5)),
                       ("failed", lambda g: max(i for i, r in enumerate(g.rewards) if r <= 0.5))):
        items, meta = [], []
        for p, g in mixed:
            traj = g.trajectory(pick(g), eos)
            for pos in positions:
                items.append(ctx.replay_item(p, traj, _cut(traj, pos)))
                meta.append((p.uid, pos, float(np.mean(g.rewards))))
        rows[kind] = [(uid, pos, p0, rate) for (uid, pos, p0), rate in
                      zip(meta, _success(ctx.sample_groups(items, n, purpose="probe")))]
    ok = rows["successful"]
    pred = [sigma_hat(p0, pos) for _, pos, p0, _ in ok]
    emp = [math.sqrt(r * (1 - r)) for *_, r in ok]
    uids = [u for u, *_ in ok]
    out["pearson_pooled"] = correlation_ci(pred, emp, uids, pearson, b)
    out["spearman_pooled"] = correlation_ci(pred, emp, uids, spearman, b)
    for name, fn in (("pearson_by_position", pearson), ("spearman_by_position", spearman)):
        out[name] = [fn([x for x, r in zip(pred, ok) if r[1] == pos], [y for y, r in zip(emp, ok) if r[1] == pos])
                     for pos in positions]
    for kind in ("failed", "successful"):
        by = {pos: [r for _, q, _, r in rows[kind] if q == pos] for pos in positions}
        out[f"{kind}_success"] = [float(np.mean(by[pos])) for pos in positions]
        out[f"{kind}_all_fail"] = [float(np.mean([r == 0.0 for r in by[pos]])) for pos in positions]
    out["positions"] = list(positions)
    return out


# ------------------------------------------------------------------ report
def fmt(x) -> str:
    """Three decimals, or "n/a" for a missing (None or NaN) value."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def report(curve: dict | None, checks: dict | None) -> str:
    lines = []
    if curve:
        lines += [f"### Figure 7: continuation success from a truncated expert trace ({curve['problems']} problems)",
                  "", "| alpha | mean | 25 % | 75 % |", "|---:|---:|---:|---:|"]
        lines += [f"| {a:.2f} | {m:.3f} | {lo:.3f} | {hi:.3f} |"
                  for a, m, lo, hi in zip(curve["alphas"], curve["mean"], curve["q25"], curve["q75"])]
        lines += ["", f"Line through the means: {curve['slope']:.3f} x alpha + {curve['intercept']:.3f}, "
                  f"R^2 {fmt(curve['r2'])}, largest residual {curve['max_residual']:.3f}. "
                  f"Paper: {PAPER['figure7']}.", ""]
    if checks and "not_computed" in checks:
        lines += ["### Appendix D.5: not computed on this policy", "", checks["not_computed"], ""]
    elif checks:
        pos = " / ".join(f"{p:.0%}" for p in checks["positions"])
        lines += [f"### Appendix D.5: sigma-hat against the empirical continuation spread "
                  f"({checks['mixed']} of {checks['problems']} problems with a mixed first group)", "",
                  "| statistic | measured | paper (Qwen2.5-7B-Instruct) |", "|---|---|---|"]
        for k in ("pearson_pooled", "spearman_pooled"):
            e, lo, hi = checks[k]
            pe, plo, phi = PAPER[k]
            lines.append(f"| {k.replace('_', ' ')} | {fmt(e)} [{fmt(lo)}, {fmt(hi)}] | {pe} [{plo}, {phi}] |")
        for k in ("pearson_by_position", "spearman_by_position"):
            lines.append(f"| {k.replace('_', ' ')} ({pos}) | {' / '.join(fmt(v) for v in checks[k])} | "
                         f"{' / '.join(str(v) for v in PAPER[k])} |")
        for k, say in PREFIX_ROWS:
            lines.append(f"| {say} ({pos}) | {' / '.join(fmt(v) for v in checks[k])} | "
                         f"{' / '.join(str(v) for v in PAPER[k])} |")
        lines.append("")
    return "\n".join(lines)


def measure(model: Path, hard: Path, split: str = "train", max_problems: int | None = None, n_curve: int = 8,
            n_prefix: int = 16, max_new_tokens: int = 128, temperature: float = 1.0, seed: int = 0,
            only: str | None = None, skip_few_mixed: bool = False, d5_scan: int | None = None,
            d5_mixed: int | None = None) -> tuple[dict | None, dict | None]:
    """(Figure 7 curve, D.5 checks) of the policy in ``model`` (a pretrain or train artifact) on
    the ``split`` of the hard subset in ``hard`` (a filter_hard artifact): the curve on its first
    ``max_problems``, D.5 on the first ``d5_mixed`` problems with a mixed first group among its
    first ``d5_scan`` (both default to ``max_problems``). With ``skip_few_mixed`` a policy too
    rarely mixed for D.5 gives ``{"not_computed": reason}``."""
    from components.data.prompting import encode_prompt
    from components.data.schema import read_problems
    from components.engine.base import SamplingParams, TokenMeter
    from components.methods.base import RolloutContext
    from components.stages.common import grade_fn, open_engine

    every = read_problems(hard / f"{split}.jsonl")
    problems = every[:max_problems]
    scanned = every[:d5_scan or max_problems]
    engine, tok = open_engine(model, TokenMeter(stage="analysis", label="vsr_states"))
    grade = grade_fn()
    ctx = RolloutContext(engine=engine, grade=grade, encode_prompt=lambda p: encode_prompt(p, tok),
                         sampling=SamplingParams(temperature, 1.0, max_new_tokens, seed=seed))
    try:
        curve = truncation_curve(ctx, problems, n_curve) if only in (None, "curve") else None
        try:
            checks = prefix_checks(ctx, scanned, n_prefix, max_mixed=d5_mixed) if only in (None, "prefixes") else None
        except TooFewMixed as e:
            if not skip_few_mixed:
                raise
            checks = {"not_computed": str(e)}
    finally:
        grade.grader.close()
    return curve, checks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="a pretrain or train stage artifact")
    ap.add_argument("--hard", type=Path, required=True, help="a filter_hard stage artifact")
    ap.add_argument("--split", default="train", help="the hard subset's split (train: the paper's training subset)")
    ap.add_argument("--max-problems", type=int, default=None)
    ap.add_argument("--n-curve", type=int, default=8)
    ap.add_argument("--n-prefix", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("curve", "prefixes"), default=None)
    ap.add_argument("--d5-scan", type=int, default=None, help="problems scanned for a mixed first group (D.5)")
    ap.add_argument("--d5-mixed", type=int, default=None, help="D.5 on at most this many mixed problems")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    curve, checks = measure(args.model, args.hard, args.split, args.max_problems, args.n_curve, args.n_prefix,
                            args.max_new_tokens, args.temperature, args.seed, args.only,
                            d5_scan=args.d5_scan, d5_mixed=args.d5_mixed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vsr_states.json").write_text(json.dumps({"curve": curve, "checks": checks, "paper": PAPER}, indent=1))
    text = report(curve, checks)
    (args.out / "vsr_states.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
