"""The stage graph of a sweep: which stage is called for which cell, with which params and
which upstream artifacts as inputs. Orchestrator-neutral (pydantic + stdlib only): the
Kubeflow pipeline (``components/kfp``) runs these calls as they are, and
``tests/kfp/test_kfp_same_graph.py`` checks that the Airflow DAG (``dags/rlvr_sweep.py``)
makes exactly the same calls for every sweep in ``dags/sweeps``.

A stage's upstream results are ``rlvr run-stage`` results (``{"uri", "run_id", ...}``)
labelled with the cell they are for, as the Airflow pods' XComs are (``--extra``):
per-model stages carry ``model``, train carries its grid cell (``model``, ``method``,
``seed``, ``key``), evaluate carries ``label``.
"""
from __future__ import annotations

import json
from typing import Any

from components.sweep import Sweep, slug

# Execution order; each stage's upstream results by name (what ``calls`` reads).
STAGES: dict[str, tuple[str, ...]] = {
    "prepare_data": (),
    "pretrain": ("data",),
    "filter_hard": ("data", "models"),
    "seed_prefixes": ("hard",),
    "train": ("models", "hard", "prefixes"),
    "evaluate": ("trains", "models", "hard"),
    "tokens": ("trains",),
    "tables": ("evals", "trains", "tokens"),
}
# The name under which a stage's results feed later stages.
RESULT_NAME = {"prepare_data": "data", "pretrain": "models", "filter_hard": "hard", "seed_prefixes": "prefixes",
               "train": "trains", "evaluate": "evals", "tokens": "tokens", "tables": "tables"}
# Stages with one call per sweep (the rest map over models, grid cells or eval cells).
SINGLE = ("prepare_data", "tokens", "tables")


class GraphError(ValueError):
    """Upstream results do not fit the sweep (a missing model, a result without its cell)."""


def call(stage: str, cell: str, params: dict, inputs: dict, extra: dict | None = None) -> dict[str, Any]:
    return {"stage": stage, "cell": cell, "params": params, "inputs": inputs, "extra": extra or {}}


def _by(results: Any, field: str, what: str) -> dict[str, dict]:
    """Results labelled with ``field`` (a list, as a fan-in hands them over), keyed by it."""
    if isinstance(results, dict) and "uri" not in results:
        return results  # already keyed (the Airflow local mode's per-model dicts)
    out = {}
    for r in results or []:
        if not isinstance(r, dict) or field not in r or "uri" not in r:
            raise GraphError(f"{what}: result without '{field}' or 'uri': {json.dumps(r)[:200]}")
        out[r[field]] = r
    return out


def _uri(results: dict[str, dict], key: str, what: str) -> str:
    if key not in results:
        raise GraphError(f"{what}: no result for {key!r} (have: {', '.join(sorted(results)) or 'none'})")
    return results[key]["uri"]


def calls(cfg: Sweep, stage: str, up: dict[str, Any]) -> list[dict[str, Any]]:
    """The stage calls of ``stage`` for this sweep, given its upstream results ``up``
    (keys: ``STAGES[stage]``). Each call: ``{stage, cell, params, inputs, extra}``; ``cell``
    names the call (a model slug, grid key or eval label), ``extra`` labels its result."""
    if stage not in STAGES:
        raise GraphError(f"unknown stage {stage!r} (stages: {', '.join(STAGES)})")
    missing = [k for k in STAGES[stage] if up.get(k) is None]
    if missing:
        raise GraphError(f"{stage}: missing upstream results: {', '.join(missing)}")
    st = cfg.stages
    if stage == "prepare_data":
        return [call(stage, "data", st.prepare_data, {})]
    if stage == "pretrain":
        return [call(stage, slug(m), cfg.pretrain_params(m), {"data": up["data"]["uri"]}, {"model": m})
                for m in cfg.pretrained_models()]
    if stage == "filter_hard":
        models = _by(up["models"], "model", "pretrain")
        return [call(stage, slug(m), st.filter_hard,
                     {"data": up["data"]["uri"], "model": _uri(models, m, "pretrain")}, {"model": m})
                for m in cfg.models]
    if stage == "seed_prefixes":
        hard = _by(up["hard"], "model", "filter_hard")
        return [call(stage, slug(m), st.seed_prefixes, {"hard": _uri(hard, m, "filter_hard")}, {"model": m})
                for m in cfg.models]
    if stage == "train":
        models, hard = _by(up["models"], "model", "pretrain"), _by(up["hard"], "model", "filter_hard")
        prefixes = _by(up["prefixes"], "model", "seed_prefixes")
        return [call(stage, g["key"], cfg.train_params(g["method"], g["seed"]),
                     {"model": _uri(models, g["model"], "pretrain"), "hard": _uri(hard, g["model"], "filter_hard"),
                      "prefixes": _uri(prefixes, g["model"], "seed_prefixes"),
                      **({"teacher": _uri(models, t, "pretrain")} if (t := cfg.teacher_of(g["method"])) else {})}, g)
                for g in cfg.grid()]
    if stage == "evaluate":
        # every trained model that has a result, each base model and used teacher, x the eval targets
        models, hard = _by(up["models"], "model", "pretrain"), _by(up["hard"], "model", "filter_hard")
        uris = {k: r["uri"] for k, r in _by(up["trains"], "key", "train").items()}
        uris.update({k: _uri(models, m, "pretrain") for k, m in cfg.untrained_eval_models().items()})
        return [call(stage, e["label"], cfg.evaluate_params(e["label"], e["benchmark"]),
                     {"model": uris[e["key"]], "hard": _uri(hard, e["model"], "filter_hard")}, {"label": e["label"]})
                for e in cfg.eval_cells() if e["key"] in uris]
    trains = _by(up["trains"], "key", "train")
    runs = {f"run_{k}": trains[k]["uri"] for k in sorted(trains, key=_grid_order(cfg))}
    if stage == "tokens":
        return [call(stage, "tokens", st.tokens, runs)]
    evals = _by(up["evals"], "label", "evaluate")
    inputs = {f"eval_{k}": evals[k]["uri"] for k in sorted(evals, key=_eval_order(cfg))}
    return [call(stage, "tables", st.tables, {**inputs, **runs, "tokens": up["tokens"]["uri"]})]


def _grid_order(cfg: Sweep):
    order = {g["key"]: i for i, g in enumerate(cfg.grid())}
    return lambda k: (order.get(k, len(order)), k)


def _eval_order(cfg: Sweep):
    order = {e["label"]: i for i, e in enumerate(cfg.eval_cells())}
    return lambda k: (order.get(k, len(order)), k)


def dry_result(stage: str, params: dict, inputs: dict, extra: dict | None = None) -> dict[str, Any]:
    """A placeholder result shaped like ``rlvr run-stage``'s, for dry runs of either
    orchestrator: its URI is a function of the call itself (stage, params, inputs), so two
    orchestrators that make the same calls hand the same URIs downstream."""
    import hashlib
    blob = json.dumps([stage, params, inputs], sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()
    return {"stage": stage, "uri": f"/rlvr/artifacts/{stage}/{key}", "digest": key[::-1], "run_id": key[:32],
            "cache_key": key, "cached": False, "summary": {}, **(extra or {})}
