"""Recompute a finished sweep's ``tables`` stage with today's analysis code, on the same
inputs (evaluate / train / tokens outputs) and params as its latest finished tables run.

For an analysis change (intervals, claims, plots) after a long sweep: only the tables stage
runs, through the cache (its key covers the analysis code), as a new MLflow run of the
sweep that ``rlvr tables SWEEP`` and ``scripts/readme_tables.py`` then read.

    RLVR_HOME=... .venv/bin/python scripts/rerun_tables.py SWEEP [SWEEP ...]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def latest_tables_output(name: str) -> Path:
    from components import tracking

    return Path(tracking.latest_tables_run(name).data.tags["rlvr.output_uri"])


def main(names: list[str]) -> int:
    from components import lineage

    if not names:
        print(__doc__, file=sys.stderr)
        return 2
    for name in names:
        try:
            out = latest_tables_output(name)
        except LookupError as e:
            print(f"{name}: {e}", file=sys.stderr)
            return 2
        m = json.loads((out / "manifest.json").read_text())
        inputs = {k: v["uri"] for k, v in m["inputs"].items()}
        res = lineage.run_stage("tables", m["params"], inputs, sweep=name)
        print(f"{name}: tables {'cached' if res.get('cached') else 'recomputed'} -> {res['uri']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
