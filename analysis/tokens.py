"""Token accounting at matched update counts (the VSR paper's 39.27M vs 81.30M figure)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import pandas as pd


def run_tokens(summary: dict[str, Any], rows: list[dict[str, Any]], updates: int) -> dict[str, Any]:
    """Totals of one training run over its first ``updates`` steps, by purpose."""
    tot: dict[str, float] = defaultdict(float)
    for r in rows:
        step = r.get("step")
        if step is None or step < 0 or step >= updates:
            continue
        p = r["purpose"]
        tot[f"{p}_generated"] += r["generated_tokens"]
        tot[f"{p}_prompt"] += r["prompt_tokens"]
        tot[f"{p}_sequences"] += r["sequences"]
    return {"model": summary.get("model"), "method": summary["method"], "seed": summary["seed"], "updates": updates,
            "generated_tokens": int(tot["train_rollout_generated"] + tot["discarded_generated"]),
            "kept_generated_tokens": int(tot["train_rollout_generated"]),
            "discarded_tokens": int(tot["discarded_generated"]),
            "prompt_tokens": int(tot["train_rollout_prompt"] + tot["discarded_prompt"]),
            "rollouts": int(tot["train_rollout_sequences"] + tot["discarded_sequences"]),
            "validation_generated_tokens": int(tot["validation_generated"])}


def per_method(per_run: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(per_run)
    if df.empty:
        return df
    num = ["generated_tokens", "kept_generated_tokens", "discarded_tokens", "prompt_tokens", "rollouts"]
    # one row per method, or per (model, method) when the runs name several models
    keys = ["model", "method"] if "model" in df and df["model"].nunique(dropna=False) > 1 else ["method"]
    groups = df.groupby(keys, sort=False, dropna=False)
    out = groups[num].mean().reset_index()
    out["updates"] = int(df["updates"].min())
    out["seeds"] = groups["seed"].nunique().values
    out["generated_per_update"] = out["generated_tokens"] / out["updates"]
    if "grpo" in set(out["method"]):
        g = out[out["method"] == "grpo"]
        ref = (out["model"].map(dict(zip(g["model"], g["generated_tokens"]))) if "model" in keys
               else pd.Series(float(g["generated_tokens"].iloc[0]), index=out.index))
        out["generated_vs_grpo"] = out["generated_tokens"] / ref.where(ref != 0)
    return out
