"""The papers' efficiency figures on the embedded sweep's finished train runs: generated
tokens per update (VSR vs GRPO; the VSR paper reports 0.48x in its agentic token
accounting) and rollouts to a target validation accuracy (GRPO vs VIGOR; VIGOR reports
2.3x fewer). Reads the train artifacts under $RLVR_HOME (default ./.rlvr): run
``make demo`` / ``rlvr sweep dags/sweeps/methods.yaml`` first. The target is
``--fraction`` x GRPO's best validation accuracy.

    .venv/bin/python bench/sweep_efficiency.py [--fraction 1.0] [--steps 60]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.rollouts import rollouts_table  # noqa: E402


def finished_runs(home: Path, steps: int) -> list:
    runs = []
    for d in sorted((home / "artifacts" / "train").glob("*")):
        if ".tmp" in d.name or not (d / "manifest.json").is_file():
            continue  # an attempt that never finished
        summary = json.loads((d / "summary.json").read_text())
        if summary.get("steps") != steps:
            continue
        hist = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x]
        runs.append((summary, hist))
    return runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fraction", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    home = Path(os.environ.get("RLVR_HOME") or ".rlvr")
    runs = finished_runs(home, args.steps)
    if not runs:
        sys.exit(f"{home}/artifacts/train: no finished train run with {args.steps} steps; run a sweep first")
    per_update = {}
    for s, h in runs:
        g = [r["tokens/generated"] for r in h if "tokens/generated" in r]
        per_update.setdefault(s["method"], []).append(sum(g) / len(g) if g else 0.0)
    print("mean generated tokens per update:")
    for m, v in sorted(per_update.items()):
        print(f"  {m:16s} {sum(v) / len(v):10.0f}   ({len(v)} run(s))")
    df, target = rollouts_table(runs, "grpo", fraction=args.fraction)
    print(f"\nrollouts to validation accuracy {target:.4f} ({args.fraction:g} x GRPO's best):")
    print(df.to_string(index=False))
    vsr, grpo = per_update.get("vsr"), per_update.get("grpo")
    tok = f"VSR/GRPO generated tokens per update = {sum(vsr) / len(vsr) / (sum(grpo) / len(grpo)):.2f}x" \
        if vsr and grpo else "VSR/GRPO: missing run"
    row = df.set_index("method")
    speed = f"GRPO/VIGOR rollouts to target = {row.loc['vigor', 'speedup_vs_grpo']:.2f}x" \
        if "vigor" in row.index else "GRPO/VIGOR: missing run"
    print(f"\n{tok}; {speed}")


if __name__ == "__main__":
    main()
