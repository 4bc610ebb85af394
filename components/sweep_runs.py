"""The sweep as one Airflow DAG run sees it: the validated sweep, snapshotted when the run
starts, and the run's MLflow parent run.

A DAG run must use the sweep as it was when it was triggered, also in a task cleared and
rerun hours later after someone edited the file. So ``start_sweep`` takes the snapshot once
(from the run conf when ``rlvr sweep`` triggered it, else from the file), applies the
run's trigger-form parameters, validates the result with the sweep model, and logs it as
``sweep_snapshot.json`` on the MLflow parent run. Every other task receives it from
``start_sweep``'s result. If ``start_sweep`` itself is cleared and rerun, it finds the
parent run of the same DAG run (tag ``rlvr.airflow_run``), reopens it and returns the
snapshot stored there: same parent, same sweep.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from components.sweep import Sweep, SweepError, parse_sweep

SNAPSHOT = "sweep_snapshot.json"
RUN_TAG = "rlvr.airflow_run"
# trigger-form parameters that replace the sweep's field of the same name for one run
OVERRIDABLE = ("seeds", "methods")


def apply_params(raw: dict[str, Any], params: dict[str, Any], where: str) -> Sweep:
    """The sweep with the run's parameters applied, validated by the sweep model; a bad
    value is a SweepError naming the parameter (``<dag run>: params.methods: ...``)."""
    data = dict(raw)
    for k in OVERRIDABLE:
        if params.get(k) is not None:
            data[k] = params[k]
    try:
        return parse_sweep(data, where)
    except SweepError as e:
        msg = str(e)
        for k in OVERRIDABLE:
            msg = msg.replace(f"{where}: {k}", f"{where}: params.{k}")
        raise SweepError(msg) from None


def open_sweep_run(name: str, snapshot: dict[str, Any], airflow_run: str) -> tuple[str, dict[str, Any]]:
    """(parent run id, snapshot): the parent run already made for this DAG run, reopened,
    with the snapshot stored on it; else a new parent run carrying ``snapshot``."""
    from components.tracking import client, ensure_experiment, start_sweep_run
    c = client()
    exp_id = ensure_experiment(name)
    found = c.search_runs([exp_id], f"tags.`{RUN_TAG}` = '{airflow_run}'",
                          order_by=["attributes.start_time ASC"], max_results=1)
    if found:
        run_id = found[0].info.run_id
        with tempfile.TemporaryDirectory() as td:
            stored = json.loads(Path(c.download_artifacts(run_id, SNAPSHOT, td)).read_text())
        if found[0].info.status != "RUNNING":
            c.update_run(run_id, status="RUNNING")
        return run_id, stored
    run_id = start_sweep_run(name, snapshot)
    c.set_tag(run_id, RUN_TAG, airflow_run)
    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / SNAPSHOT
        f.write_text(json.dumps(snapshot, indent=1, sort_keys=True))
        c.log_artifact(run_id, str(f))
    return run_id, snapshot


def sweep_wall_time(airflow_run: str) -> str | None:
    """``rlvr.wall_time`` of the sweep run of this Airflow run (``<dag id>/<run id>``), if closed."""
    from components.tracking import search_all
    found = search_all(f"tags.`{RUN_TAG}` = '{airflow_run}'")
    return found[0].data.tags.get("rlvr.wall_time") if found else None
