"""The trained policy in MLflow: a logged model that is an output of its training run (the
runs table's Models column; the model's page with the run's params and its evaluation),
holding the weights, and one registered model version per training run whose source is
that logged model. Called by ``components.lineage`` through ``components.tracking``.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from components.artifacts import tracking_uri
from components.tracking_spool import client

# Stages whose output holds a policy under ``model/`` (a hub model's pretrain writes none).
WEIGHTS_DIR = {"train": "model", "pretrain": "model"}
WEIGHTS_MAX_MB_ENV = "RLVR_MLFLOW_WEIGHTS_MAX_MB"   # larger weights stay in the artifact store only


@contextlib.contextmanager
def _process_tracking_uri():
    """A local (sqlite) registry resolves ``models:/<id>`` through MLflow's process-wide
    tracking URI, which ``set_tracking_uri`` also exports as MLFLOW_TRACKING_URI (and that
    variable picks this process's store): both are this store's for the call only."""
    from mlflow.tracking._tracking_service import utils
    env, before = os.environ.get("MLFLOW_TRACKING_URI"), utils._tracking_uri
    utils.set_tracking_uri(tracking_uri())
    try:
        yield
    finally:
        utils.set_tracking_uri(before)
        if env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env


def _dir_mb(d: Path) -> float:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file()) / 2**20


def logged_model_name(sweep: str, ident: dict[str, str], stage: str) -> str:
    """``<sweep>-<model>-<method>``: the registered name with dashes (a logged model's name
    may not hold a dot)."""
    from components.sweep import slug
    parts = [sweep] + ([slug(ident["model"])] if "model" in ident else []) + [ident.get("method") or stage]
    return "-".join(parts).replace(".", "-")


def log_weights(tracker, stage: str, out: Path) -> str | None:
    """The policy under ``out/model`` as an MLflow logged model that is an output of the run
    (the runs table's Models column, the model's page with the run's params and its
    evaluation). Its files are the model's artifacts; above ``RLVR_MLFLOW_WEIGHTS_MAX_MB``
    (default 1024) the weights stay in the artifact store and the model is external. Returns
    the URI the registry points at (``models:/<id>``, or the store's directory), None when
    there is no policy. A replay or retry of the same run finds the model it logged."""
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    d = out / WEIGHTS_DIR[stage] if stage in WEIGHTS_DIR else None
    if d is None or not d.is_dir():
        return None
    c = client()
    run = c.get_run(tracker.run_id)
    cap, mb = float(os.environ.get(WEIGHTS_MAX_MB_ENV, "1024")), _dir_mb(d)
    external = mb > cap
    mid = run.data.tags.get("rlvr.logged_model")
    if not (mid and c.get_logged_model(mid).status == LoggedModelStatus.READY):
        tags = {k: v for k, v in run.data.tags.items() if k.startswith("rlvr.") and k != "rlvr.error"}
        ident = {k: tags[f"rlvr.{k}"] for k in ("model", "method") if f"rlvr.{k}" in tags}
        params = {k: v for k, v in run.data.params.items() if k.startswith(f"{stage}.")}
        model = c.create_logged_model(run.info.experiment_id, name=logged_model_name(tags.get("rlvr.sweep", "rlvr"),
                                                                                     ident, stage),
                                      source_run_id=tracker.run_id, model_type="policy", params=params,
                                      tags={**tags, **({"mlflow.model.isExternal": "true", "rlvr.weights_uri":
                                                        d.as_uri()} if external else {})})
        mid = model.model_id
        try:
            if not external:
                c.log_model_artifacts(mid, str(d))
        except BaseException:
            c.finalize_logged_model(mid, LoggedModelStatus.FAILED)
            raise
        c.finalize_logged_model(mid, LoggedModelStatus.READY)
        c.log_outputs(tracker.run_id, [LoggedModelOutput(mid, 0)])
        c.set_tag(tracker.run_id, "rlvr.logged_model", mid)   # read back by register_policy and a replay
        c.set_tag(tracker.run_id, "rlvr.weights", f"{mb:.0f} MB > {WEIGHTS_MAX_MB_ENV}={cap:g}: kept at {d} only"
                  if external else f"{mb:.1f} MB logged as model {mid}")
    return d.as_uri() if external else f"models:/{mid}"


def registered_model_name(sweep: str, ident: dict[str, str]) -> str:
    from components.sweep import slug
    return ".".join([sweep] + ([slug(ident["model"])] if "model" in ident else []) + [ident["method"]])


def register_policy(run_id: str, sweep: str, ident: dict[str, str], source: str, key: str) -> str:
    """One registered model per sweep x model x method, one version per training run that
    was computed (a cache hit creates no run, so registers nothing; a retry of the same run
    finds its version), linked to the run's logged model. Returns ``name/version``."""
    from mlflow.exceptions import MlflowException
    c = client()
    name = registered_model_name(sweep, ident)
    mine = c.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
    if mine:
        return f"{name}/{mine[0].version}"
    try:
        c.create_registered_model(name, tags={"rlvr.sweep": sweep, **{f"rlvr.{k}": ident[k] for k in
                                                                      ("model", "method") if k in ident}},
                                  description=f"Policies trained with {ident['method']} from "
                                              f"{ident.get('model', 'the base policy')} in sweep {sweep}; "
                                              "one version per training run.")
    except MlflowException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    model_id = c.get_run(run_id).data.tags.get("rlvr.logged_model")
    with _process_tracking_uri():
        v = c.create_model_version(name, source, run_id=run_id, model_id=model_id,
                                   tags={"rlvr.cache_key": key, **{f"rlvr.{k}": x for k, x in ident.items()}},
                                   description=f"run {run_id}, {ident.get('label', '')}")
    if model_id:   # the model's page lists its versions from this tag (what mlflow.register_model writes)
        from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS
        have = json.loads(c.get_logged_model(model_id).tags.get(MLFLOW_MODEL_VERSIONS, "[]"))
        c.set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: json.dumps(
            have + [{"name": name, "version": str(v.version)}])})
    c.set_tag(run_id, "rlvr.registered_model", f"{name}/{v.version}")
    return f"{name}/{v.version}"
