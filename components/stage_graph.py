"""The stage graph of a sweep: which stage runs for which cell, with which params and which
upstream results as inputs. This is the only place that says so; the orchestrators emit it:

- the Airflow DAG (``dags/rlvr_sweep.py``), local and Kubernetes modes: one task per stage
  in ``STAGES`` order, each reading the upstream results its ``needs`` name; a stage that
  maps over cells gets a plan task listing its cells and one mapped task instance per cell;
- the Kubeflow pipeline (``components/kfp``): per stage a plan step (``calls``) and a
  ParallelFor over its calls.

Every task gets its calls from ``calls(cfg, stage, up)``; none writes a stage's params or
inputs itself. Orchestrator-neutral: pydantic + stdlib only (the DAG file imports it at
parse time).

A result is what ``rlvr run-stage`` prints (``{"uri", "run_id", ...}``) merged with the
call's ``extra``, the cell it is for (``labelled``): per-model stages carry ``model``,
train its grid cell (``model``, ``method``, ``seed``, ``key``), evaluate its eval cell
(``label``, ``model``, ``benchmark``). A stage's results reach later stages under its
``result`` name: the one result of a ``one`` stage, else the list of its cells' results
(any order: a fan-in collects them as they finish).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, NamedTuple

from components.sweep import Sweep, slug


class Stage(NamedTuple):
    name: str
    needs: tuple[str, ...]   # the upstream results it reads, by result name
    result: str              # the name its results go by downstream
    fan: str                 # what its calls map over: one | model | grid | eval


STAGES: tuple[Stage, ...] = (
    Stage("prepare_data", (), "data", "one"),
    Stage("pretrain", ("data",), "models", "model"),
    Stage("filter_hard", ("data", "models"), "hard", "model"),
    Stage("seed_prefixes", ("hard",), "prefixes", "model"),
    Stage("train", ("models", "hard", "prefixes"), "trains", "grid"),
    Stage("evaluate", ("trains", "models", "hard"), "evals", "eval"),
    Stage("tokens", ("trains",), "tokens", "one"),
    Stage("tables", ("evals", "trains", "tokens", "models", "hard"), "tables", "one"),
)
BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
PRODUCER: dict[str, str] = {s.result: s.name for s in STAGES}   # result name -> its stage


class GraphError(ValueError):
    """Upstream results do not fit the sweep (a missing model, a result without its cell)."""


def call(stage: str, cell: str, params: dict, inputs: dict, extra: dict | None = None) -> dict[str, Any]:
    return {"stage": stage, "cell": cell, "params": params, "inputs": inputs, "extra": extra or {}}


def _by(up: dict[str, Any], name: str, field: str) -> dict[str, dict]:
    """The results ``up[name]`` (a list, as a fan-in hands them over), keyed by their ``field``."""
    out = {}
    for r in up[name]:
        if not isinstance(r, dict) or field not in r or "uri" not in r:
            raise GraphError(f"{PRODUCER[name]}: result without '{field}' or 'uri': {json.dumps(r)[:200]}")
        out[r[field]] = r
    return out


def _uri(results: dict[str, dict], key: str, name: str) -> str:
    if key not in results:
        have = ", ".join(sorted(results)) or "none"
        raise GraphError(f"{PRODUCER[name]}: no result for {key!r} (have: {have})")
    return results[key]["uri"]


def _prepare_data(cfg: Sweep, up: dict) -> list[dict]:
    return [call("prepare_data", "data", cfg.stages.prepare_data, {})]


def _pretrain(cfg: Sweep, up: dict) -> list[dict]:
    # teachers too: their pretrain output is a distilling method's teacher input
    return [call("pretrain", slug(m), cfg.pretrain_params(m), {"data": up["data"]["uri"]}, {"model": m})
            for m in cfg.pretrained_models()]


def _filter_hard(cfg: Sweep, up: dict) -> list[dict]:
    models = _by(up, "models", "model")
    return [call("filter_hard", slug(m), cfg.filter_params(m),
                 {"data": up["data"]["uri"], "model": _uri(models, m, "models")}, {"model": m})
            for m in cfg.filter_models()]


def _seed_prefixes(cfg: Sweep, up: dict) -> list[dict]:
    hard = _by(up, "hard", "model")
    return [call("seed_prefixes", slug(m), cfg.stages.seed_prefixes, {"hard": _uri(hard, cfg.hard_model(m), "hard")},
                 {"model": m})
            for m in cfg.models]


def _train(cfg: Sweep, up: dict) -> list[dict]:
    models, hard, prefixes = _by(up, "models", "model"), _by(up, "hard", "model"), _by(up, "prefixes", "model")

    def inputs(g: dict) -> dict:
        m = g["model"]
        out = {"model": _uri(models, m, "models"), "hard": _uri(hard, cfg.hard_model(m), "hard"),
               "prefixes": _uri(prefixes, m, "prefixes")}
        if teacher := cfg.teacher_of(g["method"]):
            out["teacher"] = _uri(models, teacher, "models")
        return out

    return [call("train", g["key"], cfg.train_params(g["method"], g["seed"], g["model"]), inputs(g), g) for g in cfg.grid()]


def _evaluate(cfg: Sweep, up: dict) -> list[dict]:
    # each trained model that has a result, each base model and used teacher, x the eval targets
    models, hard = _by(up, "models", "model"), _by(up, "hard", "model")
    uris = {k: r["uri"] for k, r in _by(up, "trains", "key").items()}
    uris.update({k: _uri(models, m, "models") for k, m in cfg.untrained_eval_models().items()})
    return [call("evaluate", e["label"], cfg.evaluate_params(e["label"], e["benchmark"]),
                 {"model": uris[e["key"]], "hard": _uri(hard, cfg.hard_model(e["model"]), "hard")},
                 {k: e[k] for k in ("label", "model", "benchmark") if e[k] is not None})
            for e in cfg.eval_cells() if e["key"] in uris]


def _runs(cfg: Sweep, up: dict) -> dict[str, str]:
    """train's results as tokens' and tables' inputs (``run_<grid key>``), in grid order."""
    order = {g["key"]: i for i, g in enumerate(cfg.grid())}
    trains = _by(up, "trains", "key")
    return {f"run_{k}": trains[k]["uri"] for k in sorted(trains, key=lambda k: (order.get(k, len(order)), k))}


def _tokens(cfg: Sweep, up: dict) -> list[dict]:
    return [call("tokens", "tokens", cfg.stages.tokens, _runs(cfg, up))]


def _tables(cfg: Sweep, up: dict) -> list[dict]:
    # train outputs too: their metric histories are the training-curve plots
    order = {e["label"]: i for i, e in enumerate(cfg.eval_cells())}
    evals = _by(up, "evals", "label")
    inputs = {f"eval_{k}": evals[k]["uri"] for k in sorted(evals, key=lambda k: (order.get(k, len(order)), k))}
    runs = _runs(cfg, up)
    return [call("tables", "tables", cfg.stages.tables,
                 {**inputs, **runs, "tokens": up["tokens"]["uri"], **_policies(cfg, up, runs)})]


def _policies(cfg: Sweep, up: dict, runs: dict[str, str]) -> dict[str, str]:
    """An analysis that samples from the sweep's policies (``POLICY_ANALYSES``) reads each base
    model (``policy_<model>``) and trained run with the hard subset it trained on (``hard_<model>``,
    ``hard_run_<key>``); other sweeps' tables get none of these, so their cache keys stay."""
    from components.stages.tables import POLICY_ANALYSES

    if not set(cfg.stages.tables.get("analyses", ())) & set(POLICY_ANALYSES):
        return {}
    models, hard = _by(up, "models", "model"), _by(up, "hard", "model")
    model_of = {g["key"]: g["model"] for g in cfg.grid()}
    out = {}
    for m in cfg.models:
        out[f"policy_{slug(m)}"] = _uri(models, m, "models")
        out[f"hard_{slug(m)}"] = _uri(hard, cfg.hard_model(m), "hard")
    for name in runs:
        out[f"hard_{name}"] = _uri(hard, cfg.hard_model(model_of[name[len("run_"):]]), "hard")
    return out


CALLS: dict[str, Callable[[Sweep, dict], list[dict]]] = {
    "prepare_data": _prepare_data, "pretrain": _pretrain, "filter_hard": _filter_hard,
    "seed_prefixes": _seed_prefixes, "train": _train, "evaluate": _evaluate, "tokens": _tokens, "tables": _tables,
}


def calls(cfg: Sweep, stage: str, up: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls of ``stage`` for this sweep, given its upstream results ``up`` (keys: the
    stage's ``needs``). Each call: ``{stage, cell, params, inputs, extra}``; ``cell`` names
    the call (a model slug, grid key or eval label), ``extra`` labels its result."""
    if stage not in BY_NAME:
        raise GraphError(f"unknown stage {stage!r} (stages: {', '.join(BY_NAME)})")
    missing = [k for k in BY_NAME[stage].needs if up.get(k) is None]
    if missing:
        raise GraphError(f"{stage}: missing upstream results: {', '.join(missing)}")
    return CALLS[stage](cfg, up)


def call_for(cfg: Sweep, stage: str, up: dict[str, Any], cell: str) -> dict[str, Any]:
    """The one call of ``stage`` for ``cell`` (what a mapped task instance runs)."""
    found = [c for c in calls(cfg, stage, up) if c["cell"] == cell]
    if not found:
        raise GraphError(f"{stage}: no cell {cell!r} in sweep {cfg.name!r}")
    return found[0]


def labelled(result: dict, c: dict) -> dict:
    """A stage result labelled with the cell it is for, as ``rlvr run-stage --extra`` does."""
    return {**result, **c["extra"]}


def collect(stage: str, results: list[dict]) -> Any:
    """What later stages read of ``stage``'s results: the one result, or the list."""
    if BY_NAME[stage].fan != "one":
        return list(results)
    if len(results) != 1:
        raise GraphError(f"{stage}: expected one result, got {len(results)}")
    return results[0]


def walk(cfg: Sweep, run: Callable[[dict], dict]) -> tuple[list[dict], dict[str, Any]]:
    """Every call of the sweep in stage order, each run in this process by ``run(call)``
    (a result shaped like ``rlvr run-stage``'s). Returns the calls and every stage's
    results by result name: the reference the orchestrators' dry runs are checked against."""
    made: list[dict] = []
    up: dict[str, Any] = {}
    for s in STAGES:
        cs = calls(cfg, s.name, {k: up[k] for k in s.needs})
        made += cs
        up[s.result] = collect(s.name, [labelled(run(c), c) for c in cs])
    return made, up


def dry_result(c: dict) -> dict[str, Any]:
    """A placeholder result of call ``c`` shaped like ``rlvr run-stage``'s, for dry runs of any
    orchestrator: its URI is a function of the call's stage, params and inputs, so a call
    that differs anywhere also changes every URI downstream of it."""
    blob = json.dumps([c["stage"], c["params"], c["inputs"]], sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()
    return {"stage": c["stage"], "uri": f"/rlvr/artifacts/{c['stage']}/{key}", "digest": key[::-1],
            "run_id": key[:32], "cache_key": key, "cached": False, "summary": {}}


def planned_params(sweep: Sweep) -> list[tuple[str, dict[str, Any]]]:
    """Every (stage, params) the orchestrators will pass to run_stage, from a dry walk of the
    graph, for a pre-flight check against the stages' Params models (``rlvr sweep``, the DAG
    integrity test)."""
    made, _ = walk(sweep, dry_result)
    return [(c["stage"], c["params"]) for c in made]
