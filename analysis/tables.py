"""The sweep's main table: one row per method (base policy first), accuracy on the
held-out hard set with the spread over training seeds, and the token cost of training."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

ORDER = ["base", "sft", "grpo", "vsr"]


def method_rank(m: str) -> tuple[int, str]:
    return (ORDER.index(m), m) if m in ORDER else (len(ORDER), m)


def accuracy_table(results: list[dict[str, Any]], tokens: pd.DataFrame | None = None) -> pd.DataFrame:
    rows = []
    by_method: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_method.setdefault(r["method"], []).append(r)
    for m in sorted(by_method, key=method_rank):
        rs = by_method[m]
        acc = [r["mean_at_k"] for r in rs]
        # spread: over training seeds when there are several, else over evaluation seeds
        spread = acc if len(acc) > 1 else rs[0].get("mean_at_k_by_seed", acc)
        row = {"method": m, "runs": len(rs), "problems": rs[0]["problems"],
               "samples": rs[0]["samples_per_problem"],
               "mean@k": float(np.mean(acc)), "sd": float(np.std(spread, ddof=1)) if len(spread) > 1 else 0.0,
               "maj@k": float(np.mean([r["maj_at_k"] for r in rs]))}
        for k in sorted(rs[0]["pass_at_k"], key=int):
            row[f"pass@{k}"] = float(np.mean([r["pass_at_k"][k] for r in rs]))
        rows.append(row)
    df = pd.DataFrame(rows)
    if tokens is not None and not tokens.empty:
        cols = ["method", "updates", "generated_tokens", "prompt_tokens", "discarded_tokens", "rollouts"]
        df = df.merge(tokens[[c for c in cols if c in tokens]], on="method", how="left")
    return df


def to_markdown(df: pd.DataFrame, title: str) -> str:
    return f"## {title}\n\n" + df.to_markdown(index=False, floatfmt=".4g") + "\n"
