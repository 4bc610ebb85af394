"""Orchestration overhead of a stage: what lineage adds around a stage's compute, and the
cost of a cache hit, against the demo's real stage compute times.

Measured in one run, in a fresh RLVR_HOME (SQLite MLflow, local artifacts):
- ``bookkeeping``: ``run_stage`` of a stage whose ``run`` does nothing (1 KB output) on a new
  cache key: MLflow run + params + input lineage + manifest + atomic move + small-artifact
  upload -- the overhead every real execution pays on top of its compute;
- ``cache hit``: the same call again (MLflow search + manifest verification);
- the demo's stage compute times are read from the MLflow runs of the demo sweep in
  ``--demo-home`` (default ./.rlvr), when it has been run; ratio = bookkeeping / compute.

    .venv/bin/python bench/orchestration.py [--repeats 10] [--demo-home .rlvr]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from components.stages.base import StageParams


class noop:
    NAME, VERSION, INPUTS = "noop", 1, ()

    class Params(StageParams):
        i: int = 0

    @staticmethod
    def run(params, ctx):
        (ctx.out_dir / "out.json").write_text("{" + '"x": 0, ' * 100 + '"i": %d}' % params.i)
        return {"i": params.i}


def demo_compute_times(home: Path) -> dict[str, float]:
    """Median wall time of each stage's FINISHED, non-cached runs in the demo sweep's store."""
    from mlflow import MlflowClient

    db = home / "mlflow.db"
    if not db.is_file():
        return {}
    c = MlflowClient(tracking_uri=f"sqlite:///{db.resolve()}")
    exp = c.get_experiment_by_name("demo")
    if exp is None:
        return {}
    times: dict[str, list[float]] = {}
    for r in c.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=5000):
        stage = r.data.tags.get("rlvr.stage")
        if stage and r.info.end_time and r.info.start_time:
            times.setdefault(stage, []).append((r.info.end_time - r.info.start_time) / 1000)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--demo-home", default=".rlvr")
    args = ap.parse_args()
    demo = demo_compute_times(Path(args.demo_home))
    with tempfile.TemporaryDirectory() as td:
        os.environ["RLVR_HOME"] = td
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        from components import lineage
        # by its file's module name (the script's directory is on sys.path), not __main__: the
        # cache key fingerprints the stage module's source
        lineage.register_stage("noop", f"{Path(__file__).stem}:noop")
        lineage.run_stage("noop", {"i": -1}, {}, sweep="bench")   # store creation + imports: not timed
        fresh, hit = [], []
        for i in range(args.repeats):
            t = time.perf_counter()
            lineage.run_stage("noop", {"i": i}, {}, sweep="bench")
            fresh.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = lineage.run_stage("noop", {"i": i}, {}, sweep="bench")
            hit.append(time.perf_counter() - t)
            assert r["cached"]
    b, h = statistics.median(fresh), statistics.median(hit)
    print(f"bookkeeping per stage execution: {1e3 * b:.0f} ms (median of {args.repeats})")
    print(f"cache hit:                       {1e3 * h:.0f} ms = {h / b:.2f}x an execution's bookkeeping (same run)")
    if demo:
        print("\ndemo stage compute (median s) and bookkeeping share:")
        for stage, sec in sorted(demo.items(), key=lambda kv: -kv[1]):
            print(f"  {stage:14s} {sec:9.1f} s   overhead {100 * b / max(sec, 1e-9):6.2f} %")
    print(f"\nlineage bookkeeping = {1e3 * b:.0f} ms per stage, a cache hit {1e3 * h:.0f} ms"
          + (f"; {100 * b / sum(demo.values()) * len(demo):.2f} % of the mean demo stage" if demo else ""))


if __name__ == "__main__":
    main()
