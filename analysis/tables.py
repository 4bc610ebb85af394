"""The sweep's main table: one row per method (base policy first) and evaluation set, held-out
accuracy as the mean over training seeds with a 95 % interval (hierarchical bootstrap over
training seeds, then problems: ``analysis.stats``), the paired difference to the sweep's
reference method with its interval, the truncation rates (share of responses that hit the
response budget, at evaluation and in training) and the token cost of training."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats import accuracy_matrix, bootstrap_mean, pair_rows, paired_difference

ORDER = ["base", "sft", "grpo", "vsr"]


def method_rank(m: str) -> tuple[int, str]:
    return (ORDER.index(m), m) if m in ORDER else (len(ORDER), m)


def eval_set(r: dict[str, Any]) -> str:
    return r.get("benchmark") or r.get("split") or "heldout"


def group_results(results: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """(evaluation set, model, method) -> that method's results on that model (one per training
    seed), sorted. Each model is its own group: a held-out split is filtered by each model's
    base policy, so two models' held-out problems differ."""
    from analysis.paper import result_model
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in results:
        out.setdefault((eval_set(r), result_model(r), r["method"]), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0] != "heldout", kv[0][0], kv[0][1], method_rank(kv[0][2]))))


def _train_clip(runs: list[tuple[dict, list]] | None) -> dict[str, float]:
    per: dict[str, list[float]] = {}
    for s, _ in runs or []:
        if s.get("clip_ratio") is not None:
            per.setdefault(s["method"], []).append(float(s["clip_ratio"]))
    return {m: float(np.mean(v)) for m, v in per.items()}


def accuracy_table(results: list[dict[str, Any]], tokens: pd.DataFrame | None = None,
                   runs: list[tuple[dict, list]] | None = None, reference: str = "grpo") -> pd.DataFrame:
    """One row per (evaluation set, method). ``lo95``/``hi95``: the interval of ``mean@k``;
    ``diff_vs_<reference>`` (+ ``diff_lo95``/``diff_hi95``): paired over the same problems and
    training seeds; empty for the reference itself or when it is not in the sweep."""
    rows = []
    groups = group_results(results)
    train_clip = _train_clip(runs)
    for (where, model, m), rs in groups.items():
        A, keys, uids = accuracy_matrix(rs)
        est = bootstrap_mean(A)
        row = {"eval_set": where, "model": model, "method": m, "seeds": len(rs), "problems": A.shape[1],
               "samples": rs[0]["samples_per_problem"], "mean@k": est.mean, "lo95": est.lo, "hi95": est.hi}
        ref = groups.get((where, model, reference))
        if ref is not None and m != reference:
            R, ref_keys, _ = accuracy_matrix(ref, uids)
            try:
                d = paired_difference(*pair_rows(A, keys, R, ref_keys))
                row.update({f"diff_vs_{reference}": d.mean, "diff_lo95": d.lo, "diff_hi95": d.hi})
            except ValueError:   # rows that do not pair (a seed one method lacks): no difference printed
                pass
        row["maj@k"] = float(np.mean([r["maj_at_k"] for r in rs]))
        for k in sorted(rs[0]["pass_at_k"], key=int):
            row[f"pass@{k}"] = float(np.mean([r["pass_at_k"][k] for r in rs]))
        clips = [r["clip_ratio"] for r in rs if r.get("clip_ratio") is not None]
        row["eval_clip"] = float(np.mean(clips)) if clips else math.nan
        row["train_clip"] = train_clip.get(m, math.nan)
        rows.append(row)
    df = pd.DataFrame(rows)
    for col in ("eval_set", "model"):   # a column only where it tells rows apart
        if df[col].nunique() == 1:
            df = df.drop(columns=col)
    if tokens is not None and not tokens.empty:
        on = ["model", "method"] if "model" in tokens and "model" in df else ["method"]
        cols = on + ["updates", "generated_tokens", "prompt_tokens", "discarded_tokens", "rollouts"]
        df = df.merge(tokens[[c for c in cols if c in tokens]], on=on, how="left")
    return df


def to_markdown(df: pd.DataFrame, title: str) -> str:
    return f"## {title}\n\n" + df.to_markdown(index=False, floatfmt=".4g") + "\n"


def readable(df: pd.DataFrame, reference: str = "grpo") -> pd.DataFrame:
    """The table for people: 'mean [lo, hi]' cells instead of three columns."""
    out = df.copy()
    out["mean@k [95% CI]"] = [f"{a:.3f} [{lo:.3f}, {hi:.3f}]" for a, lo, hi in zip(df["mean@k"], df["lo95"], df["hi95"])]
    dcol = f"diff_vs_{reference}"
    if dcol in df:
        out[f"Δ vs {reference} [95% CI]"] = [
            "" if pd.isna(d) else f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
            for d, lo, hi in zip(df[dcol], df["diff_lo95"], df["diff_hi95"])]
        out = out.drop(columns=[dcol, "diff_lo95", "diff_hi95"])
    out = out.drop(columns=["mean@k", "lo95", "hi95"])
    first = [c for c in ("eval_set", "model", "method", "seeds", "problems", "samples") if c in out]
    rest = [c for c in out.columns if c not in first]
    lead = [c for c in rest if c.startswith(("mean@k", "Δ"))]
    return out[first + lead + [c for c in rest if c not in lead]]
