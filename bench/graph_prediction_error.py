"""The graph difficulty estimator's prediction error in a sweep's training runs, from MLflow: per
method and update step, the mean over training seeds of the graph presets' ``method/graph_mae``
(|predicted - observed pass rate| of the step's prompts, predicted before their rollouts),
``method/own_mae`` (the same for the per-prompt Beta(1, 1) estimate), ``method/graph_pred_mean``,
``method/observed_pass_rate``, and VIP's ``method/p_pred_mean`` (the pass rate its allocation used;
its GP's with ``vip``); then each method's mean over steps and seeds.

    RLVR_HOME=/path .venv/bin/python bench/graph_prediction_error.py graph_smoke
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from components.tracking import client  # noqa: E402

KEYS = ("graph_mae", "own_mae", "graph_mae_cold", "graph_mae_warm", "own_mae_warm", "graph_cold_frac",
        "graph_pred_mean", "observed_pass_rate", "p_pred_mean")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep")
    args = ap.parse_args()
    c = client()
    exp = c.get_experiment_by_name(args.sweep)
    if exp is None:
        raise SystemExit(f"no MLflow experiment {args.sweep!r}")
    runs = c.search_runs([exp.experiment_id], "attributes.status = 'FINISHED' and tags.`rlvr.stage` = 'train'")
    by: dict = collections.defaultdict(lambda: collections.defaultdict(list))   # (method, key) -> step -> values
    done = set()
    for r in runs:                          # newest first: one run per (method, seed)
        cell = (r.data.params["train.method"], r.data.params["train.seed"])
        if cell in done:
            continue
        done.add(cell)
        for k in KEYS:
            for x in c.get_metric_history(r.info.run_id, f"method/{k}"):
                by[(cell[0], k)][x.step].append(x.value)
    if not by:
        raise SystemExit(f"no method/graph_mae or method/p_pred_mean in the finished train runs of {args.sweep!r}")
    for (m, k), steps in sorted(by.items()):
        allv = [v for vs in steps.values() for v in vs]
        seeds = sorted({len(vs) for vs in steps.values()})
        print(f"{m} {k} (seeds per step {seeds}; mean {np.mean(allv):.4f} over {len(allv)} step values): "
              + " ".join(f"{s}:{np.mean(v):.3f}" for s, v in sorted(steps.items())))


if __name__ == "__main__":
    main()
