"""The share of invalid (zero-variance) rollout groups per update: VIGOR's Figure 9 (left) and
Appendix B ("even with VIGOR, roughly 20% of the samples at each gradient update step are still
invalid rollouts"), from train runs' records.

A group is invalid when all its rewards are equal: its advantages are zero and it gives no
gradient. Every train run logs ``groups/mixed_frac`` (the share of the update's groups with mixed
outcomes) in ``metrics.jsonl``, so the invalid share is ``1 - groups/mixed_frac``. That is a share
of *groups*; the paper's is a share of *samples*. For a fixed group size (GRPO) they are the same;
for VIGOR, whose retained prompts have larger groups, the group share weighs each prompt once.

    python -m analysis.invalid_rollouts TRAIN_DIR [TRAIN_DIR ...]   # each with summary.json + metrics.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from analysis.stats import seed_bootstrap

PAPER = {"vigor": (20.0, "VIGOR Appendix B, Figure 9 (left): 'roughly 20%' of samples per update")}
KEY = "groups/mixed_frac"


def per_step(runs: Sequence[tuple[dict[str, Any], list[dict]]]) -> pd.DataFrame:
    """``method, seed, step, invalid_share`` (percent) for every update that logged ``KEY``."""
    rows = [{"method": s["method"], "seed": s.get("seed"), "step": int(h["step"]), "invalid_share": 100 * (1 - h[KEY])}
            for s, hist in runs for h in hist if KEY in h and not math.isnan(float(h[KEY]))]
    if not rows:
        raise ValueError(f"no update logs {KEY} (metrics.jsonl of a train run)")
    return pd.DataFrame(rows).sort_values(["method", "seed", "step"], kind="stable").reset_index(drop=True)


def table(runs: Sequence[tuple[dict[str, Any], list[dict]]]) -> pd.DataFrame:
    """One row per method: the invalid share averaged over updates, each training seed's mean a
    unit of the interval (bootstrap over seeds), over the whole run and its first / last third,
    with the paper's number where it gives one."""
    df = per_step(runs)
    out = []
    for m, g in df.groupby("method", sort=True):
        row: dict[str, Any] = {"method": m, "seeds": g["seed"].nunique(), "updates": int(g.groupby("seed").size().min())}
        for part in ("all", "first third", "last third"):
            per_seed = []
            for _, s in g.groupby("seed"):
                v = s["invalid_share"].to_numpy()
                k = max(1, len(v) // 3)
                per_seed.append(float(np.mean(v if part == "all" else v[:k] if part == "first third" else v[-k:])))
            e = seed_bootstrap(per_seed)
            row[f"invalid % ({part})"] = e.mean
            if part == "all":
                row["95% CI"] = f"[{e.lo:.1f}, {e.hi:.1f}]" if len(per_seed) > 1 else "one seed"
        row["paper %"], row["paper source"] = PAPER.get(m, (math.nan, "not in the text"))
        out.append(row)
    return pd.DataFrame(out)


def read_run(train_dir: str | Path) -> tuple[dict[str, Any], list[dict]]:
    """(summary.json, metrics.jsonl rows) of one train stage output."""
    d = Path(train_dir)
    for f in ("summary.json", "metrics.jsonl"):
        if not (d / f).is_file():
            raise FileNotFoundError(f"{d}: no {f} (not a train stage output)")
    hist = []
    for i, line in enumerate((d / "metrics.jsonl").read_text().splitlines(), 1):
        if line.strip():
            try:
                hist.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{d / 'metrics.jsonl'}: line {i}: {e.msg}") from None
    return json.loads((d / "summary.json").read_text()), hist


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description="invalid (zero-variance) group share per update, per method")
    ap.add_argument("train_dirs", nargs="+")
    a = ap.parse_args(argv)
    text = table([read_run(d) for d in a.train_dirs]).to_markdown(index=False, floatfmt=".1f")
    print(text)
    return text


if __name__ == "__main__":
    main()
