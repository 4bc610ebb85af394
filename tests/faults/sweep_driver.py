"""One sweep's stage chain through lineage.run_stage, as the DAG's tasks call it
(used by test_concurrent_sweeps: two of these run at once on one store).
argv: sweep name, JSON list of train methods. Prints one JSON line of results."""
from __future__ import annotations

import json
import sys

from components import lineage


def main() -> None:
    sweep, methods = sys.argv[1], json.loads(sys.argv[2])
    parent = lineage.start_sweep_run(sweep, {"name": sweep, "methods": methods})
    run = lambda stage, params, inputs: lineage.run_stage(stage, params, inputs, sweep=sweep, parent_run_id=parent)
    data = run("prepare_data", {"n": 5}, {})
    model = run("pretrain", {}, {"data": data["uri"]})
    hard = run("filter_hard", {}, {"data": data["uri"], "model": model["uri"]})
    pref = run("seed_prefixes", {}, {"hard": hard["uri"]})
    trains = [run("train", {"method": m}, {"model": model["uri"], "hard": hard["uri"], "prefixes": pref["uri"]})
              for m in methods]
    tok = run("tokens", {}, {f"run_{t['summary']['stage']}_{i}": t["uri"] for i, t in enumerate(trains)})
    lineage.end_sweep_run(parent)
    print(json.dumps([data, model, hard, pref, *trains, tok]))


if __name__ == "__main__":
    main()
