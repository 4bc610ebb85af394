"""Rollouts to a target accuracy: VIGOR's efficiency measure (its figure of validation
accuracy against cumulative rollouts, with a target line and the ratio of rollouts GRPO
needs to what VIGOR needs; the paper reports 2.3x).

From a train run's metric history (``metrics.jsonl``): every update row carries
``rollouts`` (sequences generated that update, discarded ones included), validation rows
carry ``val/accuracy``. A validation at step s is charged the rollouts of steps <= s. The
curve is smoothed (trailing mean of the last ``window`` validations) before it is compared
with the target, and a method reports its rollouts with an interval over training seeds, or
"not reached".
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

Run = tuple[dict[str, Any], list[dict[str, float]]]   # (summary.json, metric history)


def accuracy_vs_rollouts(hist: Sequence[dict[str, float]]) -> list[tuple[float, float]]:
    """[(cumulative rollouts, validation accuracy)] in step order (step 0 = before training)."""
    per_step: dict[int, float] = {}
    vals: dict[int, float] = {}
    for h in hist:
        s = int(h["step"])
        if "rollouts" in h:
            per_step[s] = per_step.get(s, 0.0) + float(h["rollouts"])
        if "val/accuracy" in h:
            vals[s] = float(h["val/accuracy"])
    out, cum, steps = [], 0.0, sorted(set(per_step) | set(vals))
    for s in steps:
        cum += per_step.get(s, 0.0)
        if s in vals:
            out.append((cum, vals[s]))
    return out


def smoothed(points: Sequence[tuple[float, float]], window: int = 3) -> list[tuple[float, float]]:
    """Trailing moving average of the validation accuracies over the last ``window``
    validations (fewer at the start): a single lucky validation on a small set does not
    count as reaching a target, and the average never looks ahead of the rollouts spent."""
    out = []
    for i, (cum, _) in enumerate(points):
        accs = [a for _, a in points[max(0, i - window + 1):i + 1]]
        out.append((cum, sum(accs) / len(accs)))
    return out


def rollouts_to_target(hist: Sequence[dict[str, float]], target: float, window: int = 3) -> float:
    """Cumulative rollouts at the first validation whose smoothed accuracy is >= target
    (NaN if never: "not reached")."""
    for cum, acc in smoothed(accuracy_vs_rollouts(hist), window):
        if acc >= target - 1e-12:
            return cum
    return math.nan


def target_of(runs: Sequence[Run], baseline: str, target: float | None = None, fraction: float = 1.0,
              window: int = 3) -> float:
    """The target line: ``target`` if given, else ``fraction`` x the accuracy every seed of the
    baseline method reaches (VIGOR: the accuracy GRPO reaches): the smallest over its seeds of
    the best smoothed validation accuracy, so the baseline is never "not reached" by design."""
    if target is not None:
        return float(target)
    curves = [smoothed(accuracy_vs_rollouts(h), window) for s, h in runs if s["method"] == baseline]
    curves = [c for c in curves if c]
    if not curves:
        raise ValueError(f"rollouts to target: no validation accuracy for baseline method '{baseline}'")
    t = fraction * min(max(a for _, a in c) for c in curves)
    # a target the baseline already had before training is reached by everyone at 0 rollouts
    if t <= max(c[0][1] for c in curves) + 1e-12:
        raise ValueError(f"rollouts to target: '{baseline}' never rose above its starting validation "
                         f"accuracy in every seed (target {t:.3f}): no target to reach")
    return t


def generating_runs(runs: Sequence[Run]) -> list[Run]:
    # runs that generate nothing (SFT) reach any accuracy at "0 rollouts": not comparable
    return [(s, h) for s, h in runs if any(float(r.get("rollouts", 0)) > 0 for r in h)]


def by_model(runs: Sequence[Run]) -> dict[Any, list[Run]]:
    """Runs grouped by their model (``summary['model']``; None when unnamed), in first-seen order:
    each model has its own curves and so its own target."""
    out: dict[Any, list[Run]] = {}
    for s, h in runs:
        out.setdefault(s.get("model"), []).append((s, h))
    return out


def per_model_rollouts(runs: Sequence[Run], baseline: str, target: float | None = None, fraction: float = 1.0,
                       window: int = 3) -> tuple[dict[str, dict], dict[Any, float]]:
    """(method -> {(model, seed): rollouts to that model's target}, model -> target): the target of
    each model from its own baseline runs (``target_of``)."""
    per: dict[str, dict] = {}
    targets = {}
    for model, rs in by_model(generating_runs(runs)).items():
        targets[model] = target_of(rs, baseline, target, fraction, window)
        for m, d in per_seed_rollouts(rs, targets[model], window).items():
            per.setdefault(m, {}).update(d)
    return per, targets


def per_seed_rollouts(runs: Sequence[Run], target: float, window: int = 3) -> dict[str, dict]:
    """method -> {(model, training seed): rollouts to target (NaN = not reached)}."""
    from analysis.stats import run_key
    out: dict[str, dict] = {}
    for s, h in generating_runs(runs):
        out.setdefault(s["method"], {})[run_key(s)] = rollouts_to_target(h, target, window)
    return out


def rollouts_table(runs: Sequence[Run], baseline: str = "grpo", target: float | None = None,
                   fraction: float = 1.0, window: int = 3) -> tuple[pd.DataFrame, float]:
    """One row per method that generates rollouts: ``reached`` (seeds whose smoothed curve got
    to the target / seeds), the mean rollouts to the target over its seeds with a bootstrap
    interval over seeds -- only when every seed reached it (else NaN: "not reached", never a
    flattering partial mean) -- and ``speedup_vs_<baseline>`` = baseline rollouts / method rollouts."""
    from analysis.stats import seed_bootstrap

    runs = generating_runs(runs)
    t = target_of(runs, baseline, target, fraction, window)
    rows = []
    for m, by_seed in per_seed_rollouts(runs, t, window).items():
        v = list(by_seed.values())
        hit = [x for x in v if not math.isnan(x)]
        row = {"method": m, "target_accuracy": t, "seeds": len(v), "reached": f"{len(hit)}/{len(v)}",
               "rollouts_to_target": math.nan, "lo95": math.nan, "hi95": math.nan}
        if len(hit) == len(v):
            e = seed_bootstrap(v)
            row.update(rollouts_to_target=e.mean, lo95=e.lo, hi95=e.hi)
        rows.append(row)
    df = pd.DataFrame(rows)
    base = df.loc[df["method"] == baseline, "rollouts_to_target"]
    base_v = float(base.iloc[0]) if len(base) else math.nan
    df[f"speedup_vs_{baseline}"] = base_v / df["rollouts_to_target"]
    return df, t


def rollouts_plot(runs: Sequence[Run], target: float, path: Path, baseline: str = "grpo", window: int = 3) -> Path:
    from analysis.plots import plt, save

    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    colors: dict[str, str] = {}
    for s, h in runs:
        pts = smoothed(accuracy_vs_rollouts(h), window)
        if not pts or pts[-1][0] == 0:   # no rollouts generated (SFT): nothing to place on this axis
            continue
        first = s["method"] not in colors
        c = colors.setdefault(s["method"], f"C{len(colors) % 10}")
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="o", ms=3, color=c, alpha=0.8, label=s["method"] if first else None)
    ax.axhline(target, color="k", ls="--", lw=1, label=f"target {target:.3f} ({baseline} best)")
    ax.set_xlabel("cumulative rollouts")
    ax.set_ylabel(f"validation accuracy (mean of last {window})")
    ax.set_title("accuracy vs rollouts")
    ax.legend(fontsize=7)
    return save(fig, path)


def tokens_per_update_plot(runs: Sequence[Run], path: Path) -> Path:
    """Mean newly generated tokens per update, by method (VSR's token-accounting figure)."""
    from analysis.plots import plt, save

    per: dict[str, list[float]] = {}
    for s, h in runs:
        g = [float(r["tokens/generated"]) for r in h if "tokens/generated" in r]
        if g:
            per.setdefault(s["method"], []).append(sum(g) / len(g))
    methods = list(per)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * len(methods) + 2), 3.2))
    ax.bar(methods, [sum(v) / len(v) for v in per.values()], color=[f"C{i}" for i in range(len(methods))])
    ax.set_ylabel("generated tokens / update")
    ax.set_title("generation cost per update")
    ax.tick_params(axis="x", labelrotation=30)
    plt.setp(ax.get_xticklabels(), ha="right")
    return save(fig, path)
