"""Rollouts to a target accuracy: VIGOR's efficiency measure (its figure of validation
accuracy against cumulative rollouts, with a target line and the ratio of rollouts GRPO
needs to what VIGOR needs; the paper reports 2.3x).

From a train run's metric history (``metrics.jsonl``): every update row carries
``rollouts`` (sequences generated that update, discarded ones included), validation rows
carry ``val/accuracy``. A validation at step s is charged the rollouts of steps <= s.
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


def rollouts_to_target(hist: Sequence[dict[str, float]], target: float) -> float:
    """Cumulative rollouts at the first validation with accuracy >= target (NaN if never)."""
    for cum, acc in accuracy_vs_rollouts(hist):
        if acc >= target - 1e-12:
            return cum
    return math.nan


def target_of(runs: Sequence[Run], baseline: str, target: float | None = None, fraction: float = 1.0) -> float:
    """The target line: ``target`` if given, else ``fraction`` x the baseline method's best
    validation accuracy (VIGOR: the accuracy GRPO reaches), averaged over its seeds."""
    if target is not None:
        return float(target)
    best = [max((a for _, a in accuracy_vs_rollouts(h)), default=math.nan) for s, h in runs if s["method"] == baseline]
    best = [b for b in best if not math.isnan(b)]
    if not best:
        raise ValueError(f"rollouts to target: no validation accuracy for baseline method '{baseline}'")
    return fraction * sum(best) / len(best)


def rollouts_table(runs: Sequence[Run], baseline: str = "grpo", target: float | None = None,
                   fraction: float = 1.0) -> tuple[pd.DataFrame, float]:
    """One row per method that generates rollouts: mean rollouts to the target over its seeds
    (NaN if a seed never reached it: then the mean is NaN too, not a flattering partial mean), and
    ``speedup_vs_<baseline>`` = baseline rollouts / method rollouts."""
    # runs that generate nothing (SFT) reach any accuracy at "0 rollouts": not comparable
    runs = [(s, h) for s, h in runs if any(float(r.get("rollouts", 0)) > 0 for r in h)]
    t = target_of(runs, baseline, target, fraction)
    rows = [{"method": s["method"], "seed": s.get("seed"), "rollouts_to_target": rollouts_to_target(h, t)}
            for s, h in runs]
    df = pd.DataFrame(rows).groupby("method", as_index=False, sort=False).agg(
        rollouts_to_target=("rollouts_to_target", lambda x: x.mean(skipna=False)), seeds=("seed", "count"))
    base = df.loc[df["method"] == baseline, "rollouts_to_target"]
    base_v = float(base.iloc[0]) if len(base) else math.nan
    df[f"speedup_vs_{baseline}"] = base_v / df["rollouts_to_target"]
    df.insert(1, "target_accuracy", t)
    return df, t


def rollouts_plot(runs: Sequence[Run], target: float, path: Path, baseline: str = "grpo") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    colors: dict[str, str] = {}
    for s, h in runs:
        pts = accuracy_vs_rollouts(h)
        if not pts or pts[-1][0] == 0:   # no rollouts generated (SFT): nothing to place on this axis
            continue
        c = colors.setdefault(s["method"], f"C{len(colors)}")
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="o", ms=3, color=c, label=f"{s['method']} s{s.get('seed')}")
    ax.axhline(target, color="k", ls="--", lw=1, label=f"target {target:.3f} ({baseline} best)")
    ax.set_xlabel("cumulative rollouts")
    ax.set_ylabel("validation accuracy")
    ax.set_title("accuracy vs rollouts")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def tokens_per_update_plot(runs: Sequence[Run], path: Path) -> Path:
    """Mean newly generated tokens per update, by method (VSR's token-accounting figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
