"""The pipeline's small CPU steps, run inside the pipeline image (main environment, no kfp)::

    python -m components.kfp.steps start-sweep --sweep JSON --seeds JSON --methods JSON --run ID
        --parent-out FILE --sweep-out FILE
    python -m components.kfp.steps plan STAGE --sweep JSON [--parent ID] [--data JSON --models JSON ...]
        (--calls-out FILE | --params-out FILE --inputs-out FILE)
    python -m components.kfp.steps end-sweep --sweep-name NAME --run ID --status JSON

``start-sweep`` snapshots the sweep for this pipeline run (the compiled sweep with the run's
``seeds`` / ``methods`` parameters applied and validated, as the Airflow trigger form does)
and opens, or on a retry reopens, the MLflow parent run tagged with the KFP run id.
``plan`` turns that snapshot and the upstream stage results into the stage's calls
(``components/stage_graph.py``), with params / inputs / extra already serialised exactly as
the Airflow pods get them, so the stage step only substitutes them into
``rlvr run-stage STAGE --params P --inputs I ...``. ``end-sweep`` is the exit handler: it
closes the parent run FINISHED or FAILED from the pipeline's final status.

Every failure exits non-zero with one line on stderr; an output file is written whole
(temp file + rename) or not at all.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from components import stage_graph
from components.artifacts import write_atomic
from components.sweep import Sweep, SweepError, parse_sweep

UPSTREAM = tuple(s.result for s in stage_graph.STAGES)
RUN_TAG_PREFIX = "kfp/"   # value of the parent run's orchestrator-run tag: kfp/<pipeline run id>


class StepError(RuntimeError):
    """A step cannot do its job; ``str`` is one line."""


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise StepError(f"--{what}: not valid JSON ({e})") from None


def snapshot(sweep: dict, seeds: list | None, methods: list | None, where: str) -> Sweep:
    """The compiled sweep with this run's parameters applied, validated by the sweep model."""
    from components.sweep_runs import apply_params
    return apply_params(sweep, {"seeds": seeds, "methods": methods}, where)


def serialised(c: dict, parent: str) -> dict[str, str]:
    """One call as a ParallelFor item: its arguments as the exact strings the Airflow pods
    pass (``components.k8s.stage_pods.template_safe_json``: sorted keys), and the parent run id."""
    from components.k8s.stage_pods import template_safe_json
    return {"cell": c["cell"], "params": template_safe_json(c["params"]), "parent": parent,
            "inputs": template_safe_json(c["inputs"]), "extra": template_safe_json(c["extra"])}


def plan(stage: str, sweep: dict, up: dict[str, Any], parent: str = "") -> list[dict[str, str]]:
    cfg = parse_sweep(sweep, f"<sweep snapshot of {sweep.get('name', '?')}>")
    try:
        return [serialised(c, parent) for c in stage_graph.calls(cfg, stage, up)]
    except stage_graph.GraphError as e:
        raise StepError(f"plan {stage}: {e}") from None


def start_sweep(a: argparse.Namespace) -> None:
    from components.sweep_runs import open_sweep_run
    raw = _json(a.sweep, "sweep")
    snap = snapshot(raw, _json(a.seeds, "seeds"), _json(a.methods, "methods"), f"kfp run {a.run}")
    parent, stored = open_sweep_run(snap.name, snap.model_dump(mode="json"), RUN_TAG_PREFIX + a.run)
    parse_sweep(stored, f"<stored snapshot of run {parent}>")
    write_atomic(a.parent_out, parent)
    write_atomic(a.sweep_out, json.dumps(stored, sort_keys=True))
    print(json.dumps({"parent": parent, "sweep": snap.name}))


def _result(value: Any, what: str) -> Any:
    """A stage result arrives as its JSON text (one) or a list of them (a fan-in)."""
    if isinstance(value, list):
        return [_result(v, what) for v in value]
    return _json(value, what) if isinstance(value, str) else value


def plan_cmd(a: argparse.Namespace) -> None:
    up = {k: _result(_json(getattr(a, k), k), k) for k in UPSTREAM if getattr(a, k) is not None}
    items = plan(a.stage, _json(a.sweep, "sweep"), up, a.parent or "")
    if a.calls_out:
        write_atomic(a.calls_out, json.dumps(items))
    else:  # a one-call stage: its params and inputs as two plain strings
        if len(items) != 1:
            raise StepError(f"plan {a.stage}: expected one call, got {len(items)}")
        if not (a.params_out and a.inputs_out):
            raise StepError("plan: give --calls-out, or --params-out and --inputs-out")
        write_atomic(a.params_out, items[0]["params"])
        write_atomic(a.inputs_out, items[0]["inputs"])
    print(json.dumps({"stage": a.stage, "cells": [i["cell"] for i in items]}))


def end_sweep(a: argparse.Namespace) -> None:
    """Close the parent run of this pipeline run: FINISHED when the pipeline body succeeded."""
    from components.sweep_runs import RUN_TAG
    from components.tracking import client, end_sweep_run
    state = _json(a.status, "status").get("state", "")
    status = "FINISHED" if state == "SUCCEEDED" else "FAILED"
    c = client()
    exp = c.get_experiment_by_name(a.sweep_name)
    runs = c.search_runs([exp.experiment_id], f"tags.`{RUN_TAG}` = '{RUN_TAG_PREFIX}{a.run}'",
                         max_results=1) if exp else []
    if not runs:
        if status == "FAILED":  # the body failed before start-sweep opened a run: nothing to close
            print(json.dumps({"closed": None, "status": status, "state": state}))
            return
        raise StepError(f"end-sweep: no parent run tagged {RUN_TAG}={RUN_TAG_PREFIX}{a.run} in '{a.sweep_name}'")
    end_sweep_run(runs[0].info.run_id, status)
    print(json.dumps({"closed": runs[0].info.run_id, "status": status, "state": state}))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m components.kfp.steps")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start-sweep")
    for k in ("sweep", "seeds", "methods", "run", "parent-out", "sweep-out"):
        s.add_argument(f"--{k}", required=True)
    s.set_defaults(fn=start_sweep)
    p = sub.add_parser("plan")
    p.add_argument("stage")
    p.add_argument("--sweep", required=True)
    p.add_argument("--parent", help="the MLflow parent run id, copied into each call")
    for k in UPSTREAM:
        p.add_argument(f"--{k}")
    for k in ("calls-out", "params-out", "inputs-out"):
        p.add_argument(f"--{k}")
    p.set_defaults(fn=plan_cmd)
    e = sub.add_parser("end-sweep")
    for k in ("sweep-name", "run", "status"):
        e.add_argument(f"--{k}", required=True)
    e.set_defaults(fn=end_sweep)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        a.fn(a)
    except (StepError, SweepError) as e:
        print(" ".join(str(e).split()), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
