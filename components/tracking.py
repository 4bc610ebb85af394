"""MLflow side of lineage: one client per tracking URI, experiments with an explicit
artifact location, the stage ``Tracker`` backed by one run (addressed by id), and the
parent run of a sweep. mlflow itself is imported lazily (2-3 s).
"""
from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path
from typing import Any

from components.artifacts import _canonical, artifact_root, tracking_uri

# MLflow limits (mlflow.utils.validation): keys 250, param values 6000, tags 8000.
_MAX_KEY, _MAX_PARAM, _MAX_TAG = 250, 6000, 8000


# ---------------------------------------------------------------- mlflow helpers

_clients: dict[str, Any] = {}


def client():
    from mlflow import MlflowClient
    uri = tracking_uri()
    if uri not in _clients:  # one store (and one sqlite engine) per URI per process
        _clients[uri] = MlflowClient(tracking_uri=uri)
    return _clients[uri]


def ensure_experiment(name: str) -> str:
    from mlflow.exceptions import MlflowException
    c = client()
    exp = c.get_experiment_by_name(name)
    if exp is None:
        # Explicit location: otherwise MLflow puts artifacts under ./mlruns of the cwd.
        # A remote tracking server chooses its own (proxied) location.
        loc = None if tracking_uri().startswith(("http:", "https:", "databricks")) else artifact_root().as_uri()
        try:
            return c.create_experiment(name, artifact_location=loc)
        except MlflowException:  # created concurrently by another process
            exp = c.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        c.restore_experiment(exp.experiment_id)
    return exp.experiment_id


def _one_line(text: Any, limit: int = 500) -> str:
    s = " ".join(str(text).split())
    return s[:limit]


def _flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key[:_MAX_KEY]] = (v if isinstance(v, str) else _canonical(v))[:_MAX_PARAM]
    return out


class MlflowTracker:
    """The stage Tracker backed by one MLflow run, addressed by id (never the
    fluent active-run global, which is per-process and per-thread)."""

    def __init__(self, run_id: str):
        self.run_id = run_id

    def _batch(self, kind: str, items: list, size: int) -> None:  # MLflow's per-call limits
        for i in range(0, len(items), size):
            client().log_batch(self.run_id, **{kind: items[i:i + size]})

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric
        ts = int(time.time() * 1000)
        self._batch("metrics", [Metric(k[:_MAX_KEY], float(v), ts, step or 0) for k, v in metrics.items()], 1000)

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param
        self._batch("params", [Param(k, v) for k, v in _flatten(params).items()], 100)

    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag
        self._batch("tags", [RunTag(k[:_MAX_KEY], str(v)[:_MAX_TAG]) for k, v in tags.items()], 100)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        log = client().log_artifacts if Path(path).is_dir() else client().log_artifact
        log(self.run_id, str(path), artifact_path)


# ---------------------------------------------------------------- sweep parent runs

def start_sweep_run(sweep_name: str, config: dict) -> str:
    """The parent run of one sweep execution; stage runs hang under it."""
    import tempfile

    import yaml
    c = client()
    exp_id = ensure_experiment(sweep_name)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run = c.create_run(exp_id, run_name=f"sweep-{sweep_name}-{stamp}",
                       tags={"rlvr.sweep": sweep_name, "rlvr.kind": "sweep"})
    tracker = MlflowTracker(run.info.run_id)
    tracker.log_params({k: config[k] for k in ("executor", "seeds", "models", "methods", "retries") if k in config})
    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / "sweep.yaml"
        f.write_text(yaml.safe_dump(config, sort_keys=False))
        tracker.log_artifact(f)
    return run.info.run_id


def end_sweep_run(run_id: str, status: str = "FINISHED") -> None:
    client().set_terminated(run_id, status)
