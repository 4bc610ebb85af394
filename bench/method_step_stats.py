"""Per training run in an RLVR_HOME: the mean over its steps of the method's own numbers
(``method/*`` in metrics.jsonl: SARA's committed / abandoned prompts, PAIR's continued
candidates, CERO's price, the compositions' state units ...) and the share of mixed groups.

    RLVR_HOME=/path .venv/bin/python bench/method_step_stats.py [--methods sara pair ...] [--live-only]

``--live-only``: only the steps where the method reports ``method/live`` 1 (RAIL after its
shadow phase).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from components.artifacts import rlvr_home  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--methods", nargs="*", default=None)
    ap.add_argument("--live-only", action="store_true", help="only steps with method/live == 1")
    args = ap.parse_args()
    runs = sorted((rlvr_home() / "artifacts" / "train").glob("*/summary.json"))
    if not runs:
        raise SystemExit(f"no finished training runs under {rlvr_home() / 'artifacts' / 'train'}")
    for s in runs:
        summary = json.loads(s.read_text())
        if args.methods and summary["method"] not in args.methods:
            continue
        rows = [json.loads(line) for line in (s.parent / "metrics.jsonl").read_text().splitlines() if line.strip()]
        rows = [r for r in rows if r.get("method/live") == 1] if args.live_only else rows
        if not rows:
            continue
        keys = sorted({k for r in rows for k in r if k.startswith("method/")})
        mixed = [r["groups/mixed_frac"] for r in rows if "groups/mixed_frac" in r]
        stats = {k[len("method/"):]: round(float(np.mean([r[k] for r in rows if k in r])), 3) for k in keys}
        print(f"{summary['method']} (seed {summary['seed']}, {len(mixed)} steps, {s.parent.name[:12]}): "
              f"mixed_frac {np.mean(mixed):.3f} {stats}")


if __name__ == "__main__":
    main()
