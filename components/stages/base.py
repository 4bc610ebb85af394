"""The stage contract. A stage is one module in ``components/stages/`` with:

- ``NAME``     its registry name (``prepare_data``, ``train``, ...)
- ``VERSION``  bump when the code changes what the stage produces (part of the cache key)
- ``Params``   a pydantic model (``StageParams`` subclass: unknown keys are errors)
- ``INPUTS``   names of the upstream artifacts it needs (``{"data": ..., "model": ...}``)
- ``run(params, ctx) -> dict``  writes its outputs under ``ctx.out_dir`` and returns a small
  JSON-able summary (stored in the manifest and returned to Airflow as XCom).

``components.lineage.run_stage`` wraps it: cache key, MLflow run, temporary output
directory, digest manifest, atomic move. A stage never writes outside ``ctx.out_dir``
except into ``ctx.work_dir`` (checkpoints that survive a crash, keyed by the cache key).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from components.error_text import FieldError


class StageParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Fields added after a stage's VERSION was published. While at their default they are
    # left out of the dump -- and so of the cache key -- so every existing cache stays valid.
    ADDED_FIELDS: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        d = handler(self)
        if isinstance(d, dict):
            for k in self.ADDED_FIELDS:
                if k in d and getattr(self, k) == type(self).model_fields[k].default:
                    d.pop(k)
        return d


class TaskParams(StageParams):
    """Params of a stage that takes every task (``components.trainer.task.TASKS``): ``task``
    picks it. A field the sweep leaves out takes the task's default (``TASK_DEFAULTS``, over
    the field defaults, which are math's); a field of one task only (``ONLY``) set on the other
    is refused by name, and so is an old spelling (``RENAMED``), with the name to use."""

    TASK_DEFAULTS: ClassVar[dict[str, dict[str, Any]]] = {}
    ONLY: ClassVar[dict[str, str]] = {}
    RENAMED: ClassVar[dict[str, str]] = {}
    task: Literal["math", "agentic"] = "math"

    @model_validator(mode="before")
    @classmethod
    def _task_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for old, new in cls.RENAMED.items():
            if old in data:
                raise FieldError(old, f"renamed: use {new}")
        task = data.get("task", cls.model_fields["task"].default)
        for k, v in cls.ONLY.items():
            if k in data and v != task and data[k] != cls.model_fields[k].default:
                raise FieldError(k, f"applies to task {v} only (this run's task is {task})")
        return {**cls.TASK_DEFAULTS.get(task, {}), **data}


# Where a stage's torch model runs (``components.engine.device``): ``cpu`` (the default: the
# float32 results every cached artifact and reference record was computed with), ``cuda`` /
# ``cuda:N``, or ``auto`` (cuda when torch sees a device). The cache key holds the spec as
# written, so an ``auto`` artifact is the one of the machine that computed it (its summary
# names the device).
Device = Annotated[str, Field(pattern=r"^(cpu|auto|cuda(:[0-9]+)?)$",
                              description="cpu | auto | cuda | cuda:N: where the stage's model runs")]


def check_engine_device(engine: str, device: str) -> None:
    """vLLM places its own model: ``device`` is the embedded engine's (``engine: hf``)."""
    if engine != "hf" and device != "cpu":
        raise FieldError("device", f"{device!r} applies to engine hf only (engine {engine} places its own model)")


class Tracker(Protocol):
    run_id: str

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...
    def log_params(self, params: dict[str, Any]) -> None: ...
    def set_tags(self, tags: dict[str, str]) -> None: ...
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...


class NullTracker:
    """For library calls outside a stage (benches, notebooks): records metrics in memory."""

    run_id = ""

    def __init__(self) -> None:
        self.metrics: list[tuple[int | None, dict[str, float]]] = []
        self.params: dict[str, Any] = {}
        self.tags: dict[str, str] = {}

    def log_metrics(self, metrics, step=None):
        self.metrics.append((step, dict(metrics)))

    def log_params(self, params):
        self.params.update(params)

    def set_tags(self, tags):
        self.tags.update(tags)

    def log_artifact(self, path, artifact_path=None):
        pass


@dataclass
class StageContext:
    out_dir: Path                      # temporary; moved into place only if run() returns
    work_dir: Path                     # persistent per cache key: checkpoints for resume
    inputs: dict[str, Path]            # input name -> finished artifact directory
    tracker: Tracker
    cache_key: str = ""
    sweep: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def input(self, name: str) -> Path:
        if name not in self.inputs:
            raise KeyError(f"stage input '{name}' was not provided (have: {sorted(self.inputs)})")
        return self.inputs[name]
