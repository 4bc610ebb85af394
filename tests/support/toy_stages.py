"""Toy stages for the lineage / DAG / CLI tests: the real contract, none of the weight.

Each class is a stand-in for a stage module; lineage loads them as
``toy_stages:<name>`` (module:object). Output files depend on params and inputs so
cache keys and digests behave like the real thing. ``TOY_FAIL=<stage>`` makes that
stage raise; ``TOY_SLEEP`` (seconds) slows every stage; ``TOY_CALLS`` (a file path) gets one line appended per real execution.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

import yaml
from pydantic import Field

from components.stages.base import StageContext, StageParams


def _toy_run(name: str, params: StageParams, ctx: StageContext) -> dict:
    if os.environ.get("TOY_FAIL") == name:
        (ctx.out_dir / "partial.bin").write_bytes(b"half")  # must not survive the failure
        raise RuntimeError(f"toy {name} failed on purpose")
    if delay := os.environ.get("TOY_SLEEP"):
        time.sleep(float(delay))  # widens the race window in the concurrency test
    if calls := os.environ.get("TOY_CALLS"):
        with open(calls, "a") as f:
            f.write(name + "\n")
    ins = {n: (p / "manifest.json").read_text()[:64] for n, p in sorted(ctx.inputs.items())}
    (ctx.work_dir / "ckpt.txt").write_text("step 1")
    (ctx.out_dir / "out.json").write_text(json.dumps({"params": params.model_dump(), "inputs": sorted(ins)}))
    (ctx.out_dir / "sub").mkdir()
    (ctx.out_dir / "sub" / "notes.md").write_text(f"# {name}\n")
    ctx.tracker.log_metrics({"toy/score": 0.5}, step=1)
    if name == "tables":
        (ctx.out_dir / "tables.md").write_text("| run | acc |\n|---|---|\n" + "".join(
            f"| {n} | 0.5 |\n" for n in sorted(ctx.inputs) if n.startswith("eval_")))
    return {"stage": name, "n_inputs": len(ctx.inputs), "nan": float("nan"), "path": ctx.out_dir}


class prepare_data:
    NAME, VERSION, INPUTS = "prepare_data", 1, ()

    class Params(StageParams):
        n: int = 8
        seed: int = 0

    @staticmethod
    def run(params, ctx):
        return _toy_run("prepare_data", params, ctx)


def _toy(name: str, inputs: tuple[str, ...], params: type[StageParams]) -> type:
    """A toy stage: the contract's attributes, ``run`` = ``_toy_run``."""
    def run(params, ctx):
        return _toy_run(name, params, ctx)

    return type(name, (), {"NAME": name, "VERSION": 1, "INPUTS": inputs, "Params": params, "run": staticmethod(run)})


class _PretrainParams(StageParams):
    steps: int = 1
    model: str = "tiny"


class _FilterParams(StageParams):
    k: int = 4
    c: int = 1


class _TrainParams(StageParams):
    steps: int = 2
    method: str
    seed: int = 0
    method_config: dict[str, Any] = Field(default_factory=dict)


class _EvaluateParams(StageParams):
    label: str
    samples: int = 2


pretrain = _toy("pretrain", ("data",), _PretrainParams)
filter_hard = _toy("filter_hard", ("data", "model"), _FilterParams)
seed_prefixes = _toy("seed_prefixes", ("hard",), StageParams)
train = _toy("train", ("model", "hard", "prefixes"), _TrainParams)
evaluate = _toy("evaluate", ("model", "hard"), _EvaluateParams)
tokens = _toy("tokens", ("run_*",), StageParams)
tables = _toy("tables", ("eval_*", "run_*", "tokens"), StageParams)


def toy_sweep(name: str, methods=("grpo", "vsr"), retries: int = 0, method_config: dict | None = None,
              **stages: dict) -> str:
    """A sweep file's text for the toy stages: one seed, the tiny model at its defaults."""
    return yaml.safe_dump({"name": name, "seeds": [0], "models": ["tiny"], "model_specs": {"tiny": {}},
                           "methods": list(methods), "stages": stages, "method_config": method_config or {},
                           "retries": retries, "retry_delay_s": 0}, sort_keys=False)


ALL = ("prepare_data", "pretrain", "filter_hard", "seed_prefixes", "train", "evaluate", "tokens", "tables")
OVERRIDES = {n: f"toy_stages:{n}" for n in ALL}


_TEMPLATE_DB: list = []


def premigrated_mlflow_db(home) -> None:
    """Put an already-migrated empty MLflow sqlite DB at ``<home>/mlflow.db``: creating
    the schema takes ~8 s, copying a template made once per session takes milliseconds."""
    import shutil
    import tempfile
    from pathlib import Path

    if not _TEMPLATE_DB:
        from mlflow import MlflowClient
        db = Path(tempfile.mkdtemp(prefix="rlvr-mlflow-template-")) / "mlflow.db"
        MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
        _TEMPLATE_DB.append(db)
    Path(home).mkdir(parents=True, exist_ok=True)
    shutil.copy(_TEMPLATE_DB[0], Path(home) / "mlflow.db")
