"""A method's own per-step numbers (``method/*``) across a sweep's finished training runs.

Two readers, one per place the numbers live:

- :func:`step_means` reads the train artifacts under ``$RLVR_HOME`` (``summary.json`` +
  ``metrics.jsonl``): per run, the mean over its steps of every ``method/*`` key (SARA's
  committed / abandoned prompts, PAIR's continued candidates, CERO's price, RAIL's arm ...)
  and the share of mixed groups; ``live_only`` keeps the steps a method reports
  ``method/live == 1`` (RAIL after its shadow phase).
- :func:`metric_history` reads the FINISHED ``train`` runs of a sweep in MLflow: per method,
  key and update step, the values over training seeds (the graph presets' ``graph_mae`` /
  ``own_mae``: the error of a difficulty estimate made before the step's rollouts).

``python -m analysis.method_metrics steps [--methods rail] [--live-only]`` and
``python -m analysis.method_metrics history SWEEP [--keys graph_mae own_mae]`` print them.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any, Iterable

import numpy as np

GRAPH_KEYS = ("graph_mae", "own_mae", "graph_mae_cold", "graph_mae_warm", "own_mae_warm", "graph_cold_frac",
              "graph_pred_mean", "observed_pass_rate", "p_pred_mean")


def step_means(train_dir: Path, methods: Iterable[str] | None = None, live_only: bool = False) -> list[dict[str, Any]]:
    """One row per finished training run under ``train_dir`` (``<home>/artifacts/train``):
    method, seed, run (cache key prefix), steps, mixed_frac and the mean of each ``method/*`` key."""
    wanted = set(methods) if methods else None
    finished = sorted(p for p in train_dir.glob("*/summary.json") if (p.parent / "manifest.json").is_file())
    if not finished:
        raise LookupError(f"{train_dir}: no finished training run (a summary.json beside a manifest.json)")
    out = []
    for s in finished:
        summary = json.loads(s.read_text())
        if wanted is not None and summary["method"] not in wanted:
            continue
        rows = [json.loads(line) for line in (s.parent / "metrics.jsonl").read_text().splitlines() if line.strip()]
        if live_only:
            rows = [r for r in rows if r.get("method/live") == 1]
        if not rows:
            continue
        keys = sorted({k for r in rows for k in r if k.startswith("method/")})
        mixed = [r["groups/mixed_frac"] for r in rows if "groups/mixed_frac" in r]
        row = {"method": summary["method"], "seed": summary["seed"], "run": s.parent.name[:12], "steps": len(mixed),
               "mixed_frac": float(np.mean(mixed)) if mixed else float("nan")}
        row.update({k[len("method/"):]: float(np.mean([r[k] for r in rows if k in r])) for k in keys})
        out.append(row)
    return out


def metric_history(sweep: str, keys: Iterable[str] = GRAPH_KEYS) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(method, key) -> update step -> values over training seeds, from the newest FINISHED
    ``train`` run of each (method, seed) cell of ``sweep`` in the tracking store."""
    from components.tracking import client

    c = client()
    exp = c.get_experiment_by_name(sweep)
    if exp is None:
        raise LookupError(f"no MLflow experiment {sweep!r}")
    runs = c.search_runs([exp.experiment_id], "attributes.status = 'FINISHED' and tags.`rlvr.stage` = 'train'",
                         order_by=["attributes.start_time DESC"])
    by: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    seen = set()
    for r in runs:
        cell = (r.data.params["train.method"], r.data.params["train.seed"])
        if cell in seen:
            continue
        seen.add(cell)
        for k in keys:
            for x in c.get_metric_history(r.info.run_id, f"method/{k}"):
                by[(cell[0], k)][x.step].append(x.value)
    if not by:
        raise LookupError(f"sweep {sweep!r}: no finished train run logs any of method/{', method/'.join(keys)}")
    return {k: dict(v) for k, v in by.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    st = sub.add_parser("steps", help="per-run means of method/* from the train artifacts in $RLVR_HOME")
    st.add_argument("--methods", nargs="*", default=None)
    st.add_argument("--live-only", action="store_true")
    hi = sub.add_parser("history", help="per-step method/* values of a sweep's train runs in MLflow")
    hi.add_argument("sweep")
    hi.add_argument("--keys", nargs="*", default=list(GRAPH_KEYS))
    args = ap.parse_args(argv)
    try:
        if args.what == "steps":
            from components.artifacts import rlvr_home
            for row in step_means(rlvr_home() / "artifacts" / "train", args.methods, args.live_only):
                print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
        else:
            for (m, k), steps in sorted(metric_history(args.sweep, args.keys).items()):
                vals = [v for vs in steps.values() for v in vs]
                print(f"{m} {k}: mean {np.mean(vals):.4f} over {len(vals)} step values; "
                      + " ".join(f"{s}:{np.mean(v):.3f}" for s, v in sorted(steps.items())))
    except LookupError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
