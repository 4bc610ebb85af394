"""Sweep configuration: one YAML file = one Airflow DAG = one ablation study.

Parsed at DAG-parse time, so this module must stay light: pydantic + PyYAML only,
never torch, mlflow or airflow. Every problem becomes a ``SweepError`` carrying ONE
line ``<file>: <field path>: <problem>`` so that the Airflow import-error list, the
CLI and the tests all show the same readable message.

Shape (see ``dags/sweeps/demo.yaml``)::

    name: demo
    executor: local                 # local | kubernetes
    seeds: [0]
    models: [tiny]                  # names in model_specs, or paths / HF ids
    model_specs: {tiny: {...}}      # pretrain param overrides per model name
    teachers: [tiny_long]           # teacher-only models: pretrained and evaluated, never trained
    methods: [grpo, vsr, sft]
    stages: {prepare_data: {...}, pretrain: {...}, ..., tables: {}}
    method_config: {vsr: {rho: 0.5}}
    benchmarks: [math500, aime24]   # also evaluate every model on these (label "<key>@<bench>")
    heldout_eval: true              # and on the held-out split (the default)
    retries: 2
    kubernetes: {resources: {train: {gpus: 4}}}   # executor: kubernetes only; defaults in
                                                   # components/k8s/settings.py
    preregistration: {question: ..., seeds: 5, claims: [vsr>grpo], ...}   # a claims study
                                                   # (components/preregistration.py)
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from components import preregistration
from components.budget import DEFAULT_RESPONSE_TOKENS
from components.error_text import FieldError, one_line, validation_problem
from components.k8s.settings import KubernetesSettings, Strict
from components.methods import registry
from components.preregistration import Preregistration

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class SweepError(ValueError):
    """A sweep file is unusable; ``str(err)`` is one line naming file and field."""


def slug(text: str) -> str:
    """'Qwen/Qwen2.5-7B-Instruct' -> 'qwen2.5-7b-instruct'; used in grid keys."""
    base = text.rstrip("/").split("/")[-1] or text
    s = re.sub(r"[^a-z0-9.]+", "-", base.lower()).strip("-.")
    return s or "model"


class StagesConfig(Strict):
    """Per-stage params as plain dicts; each is validated against the stage's own
    Params model by ``lineage.run_stage`` (the stage modules are too heavy to import
    at DAG-parse time)."""

    prepare_data: dict[str, Any] = Field(default_factory=dict)
    pretrain: dict[str, Any] = Field(default_factory=dict)
    filter_hard: dict[str, Any] = Field(default_factory=dict)
    seed_prefixes: dict[str, Any] = Field(default_factory=dict)
    train: dict[str, Any] = Field(default_factory=dict)
    evaluate: dict[str, Any] = Field(default_factory=dict)
    tokens: dict[str, Any] = Field(default_factory=dict)
    tables: dict[str, Any] = Field(default_factory=dict)


def _no_duplicates(values: list, what: str) -> list:
    for i, v in enumerate(values):
        if v in values[:i]:
            raise ValueError(f"duplicate {what} {v!r} (entry {i})")
    return values


class Sweep(Strict):
    name: str
    description: str = ""
    executor: Literal["local", "kubernetes"] = "local"
    seeds: list[int] = Field(min_length=1)
    models: list[str] = Field(min_length=1)
    model_specs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # models that serve only as a distilling method's teacher (method_config.<m>.teacher): they
    # are pretrained like ``models`` and evaluated on each model's held-out set, but get no
    # filter_hard or training cells
    teachers: list[str] = Field(default_factory=list)
    methods: list[str] = Field(min_length=1)
    stages: StagesConfig = Field(default_factory=StagesConfig)
    method_config: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # per-method overrides of the train stage's params (DAPO's clip-higher, VIP's estimator, ...)
    method_train: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # per-model overrides of the train stage's params (VIGOR's 7B / Phi batch and lengths), keyed
    # by an entry of ``models``; applied before method_train: stages.train < model < method
    model_train: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # model -> one of stages.prepare_data.mixtures: the data that model filters and trains on
    # (components/data/mixtures.py); a model not named takes the base set
    model_data: dict[str, str] = Field(default_factory=dict)
    # evaluation targets besides/instead of the held-out split: names of
    # components.data.benchmarks.BENCHMARKS; each model is evaluated on each (label "<key>@<bench>")
    benchmarks: list[str] = Field(default_factory=list)
    heldout_eval: bool = True
    # One response budget (new tokens) for every stage that generates: pretrain's pass-rate
    # probe, filter_hard, train and evaluate -- "hard" must mean hard at the length the policy
    # is trained and scored with, as in the papers (one max response length). A stage overrides
    # it only with an explicit ``max_new_tokens`` in its block; None = each stage's default.
    max_response_tokens: int | None = Field(default=None, ge=1)
    # prompt budget: the train stage's ``max_prompt_length`` (verl's data.max_prompt_length;
    # the embedded trainer refuses a longer prompt)
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    # a training budget below the filter/eval budget is refused unless this says it is on purpose
    short_train_budget: bool = False
    retries: int = Field(default=2, ge=0, le=20)
    retry_delay_s: float = Field(default=5.0, ge=0)
    # GPU stage pods (image, template, resources) when executor is kubernetes; filled with
    # the defaults then, so the logged sweep config shows what the pods really get.
    kubernetes: KubernetesSettings | None = None
    # a claims study's pre-registration (components/preregistration.py): checked against the
    # sweep, judged and printed by the tables stage
    preregistration: Preregistration | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError("must be letters, digits, '_', '-', '.' (it becomes the DAG id and MLflow experiment)")
        return v

    @field_validator("seeds", "models", "methods")
    @classmethod
    def _distinct(cls, v: list, info: ValidationInfo) -> list:
        _no_duplicates(v, info.field_name.removesuffix("s"))
        if info.field_name == "models":
            _no_duplicates([slug(m) for m in v], "model slug")
        return v

    @field_validator("benchmarks")
    @classmethod
    def _benchmarks(cls, v: list[str]) -> list[str]:
        _no_duplicates(v, "benchmark")
        if v:
            from components.data.benchmarks import benchmark_names  # light: no torch
            for b in v:
                if b not in benchmark_names():
                    raise ValueError(f"unknown benchmark {b!r} (known: {', '.join(benchmark_names())})")
        return v

    @model_validator(mode="after")
    def _kubernetes_defaults(self) -> "Sweep":
        if self.executor == "kubernetes" and self.kubernetes is None:
            self.kubernetes = KubernetesSettings()
        return self

    @model_validator(mode="after")
    def _some_eval(self) -> "Sweep":
        if not self.heldout_eval and not self.benchmarks:
            raise ValueError("heldout_eval: false needs at least one entry in benchmarks")
        return self

    @model_validator(mode="after")
    def _methods_known(self) -> "Sweep":
        # a method is a name in the registry of the task its train stage runs (math or agentic);
        # its config is checked against the method's Config by the pre-flight (the train stage's
        # params), which may import torch; this runs at DAG-parse time and must not
        tasks = {m: self.task_of(m) for m in [*self.methods, *self.method_config, *self.method_train]}
        for m, task in tasks.items():
            if (task or "math") not in registry.TASKS:
                where = f"method_train.{m}" if "task" in self.method_train.get(m, {}) else "stages.train"
                known_tasks = ", ".join(t for t in registry.TASKS if t != "math")
                raise FieldError(f"{where}.task", f"unknown task {task!r} (known: {known_tasks}; none = math)")
        for field in ("methods", "method_config", "method_train"):
            for m in getattr(self, field):
                try:
                    registry.entry(m, tasks[m] or "math")
                except KeyError as e:
                    raise FieldError(field, e.args[0]) from None
        return self

    @model_validator(mode="after")
    def _response_budget(self) -> "Sweep":
        """Fill the sweep's budget into each generating stage that does not set its own, then
        refuse a training budget below the filter/eval budget (unless ``short_train_budget``)."""
        st, r = self.stages, self.max_response_tokens
        if r is not None:
            for stage in ("pretrain", "filter_hard", "train", "evaluate"):
                setattr(st, stage, {"max_new_tokens": r, **getattr(st, stage)})
        if self.max_prompt_tokens is not None:
            st.train = {"max_prompt_length": self.max_prompt_tokens, **st.train}
        if self.short_train_budget:
            return self
        budget = lambda d: d.get("max_new_tokens", DEFAULT_RESPONSE_TOKENS)  # noqa: E731
        floor = max(budget(st.filter_hard), budget(st.evaluate))
        for model in self.models:
            for m in self.methods:
                b = budget(self.train_params(m, 0, model))
                if b < floor:
                    where = (f"method_train.{m}" if "max_new_tokens" in self.method_train.get(m, {}) else
                             f"model_train.{model}" if "max_new_tokens" in self.model_train.get(model, {}) else
                             "stages.train")
                    raise FieldError(f"{where}.max_new_tokens", f"{b} is below the filter/eval response budget "
                                     f"{floor} (answers get cut off in training only); set short_train_budget: "
                                     "true if on purpose")
        return self

    def _check_model(self, where: str, model: str, why: str = "") -> None:
        if model not in self.models:
            raise FieldError(where, f"{model!r} is not one of the sweep's models ({', '.join(self.models)}){why}")

    @model_validator(mode="after")
    def _per_model_keys(self) -> "Sweep":
        for model in self.model_train:
            self._check_model(f"model_train.{model}", model)
        mixtures = self.stages.prepare_data.get("mixtures", {})
        for model, name in self.model_data.items():
            self._check_model(f"model_data.{model}", model)
            if name not in mixtures:
                raise FieldError(f"model_data.{model}", f"{name!r} is not one of stages.prepare_data.mixtures "
                                 f"({', '.join(mixtures) or 'none'})")
        if self.model_data and self.stages.filter_hard.get("filter_model"):
            raise FieldError("model_data", "with stages.filter_hard.filter_model every model trains on the filter "
                             "model's subset: per-model data would be ignored")
        return self

    @model_validator(mode="after")
    def _models_resolve(self) -> "Sweep":
        # A name without a spec is taken as a path or HF id; a bare word that is
        # neither is almost always a typo of a model_specs key, so say so early.
        for field in ("models", "teachers"):
            for i, m in enumerate(getattr(self, field)):
                if m not in self.model_specs and "/" not in m and not Path(m).expanduser().exists():
                    raise FieldError(f"{field}[{i}]", f"{m!r} is not a key of model_specs nor a path / HF id")
        return self

    @model_validator(mode="after")
    def _teachers(self) -> "Sweep":
        # a distilling method (PG-OPD) names its teacher: one of the sweep's models or teachers,
        # whose pretrain output becomes the train stage's ``teacher`` input
        named = {mc.get("teacher") for mc in self.method_config.values()}
        slugs = {slug(m): m for m in self.models}
        for i, t in enumerate(self.teachers):
            where = f"teachers[{i}]"
            if t in self.teachers[:i]:
                raise FieldError(where, f"duplicate teacher {t!r}")
            if t in self.models:
                raise FieldError(where, f"{t!r} is also in models (a model there is trained and evaluated; "
                                 "list a teacher-only model in teachers only)")
            if slug(t) in slugs:
                raise FieldError(where, f"{t!r} has the same slug {slug(t)!r} as model {slugs[slug(t)]!r}")
            if t not in named:
                raise FieldError(where, f"{t!r} is no method's teacher (name it in method_config.<method>.teacher)")
        for meth, mc in self.method_config.items():
            t = mc.get("teacher")
            if t is not None and t not in self.models and t not in self.teachers:
                raise FieldError(f"method_config.{meth}.teacher", f"{t!r} is not one of the sweep's models or teachers")
        return self

    @model_validator(mode="after")
    def _filter_model(self) -> "Sweep":
        fm = self.stages.filter_hard.get("filter_model")
        if fm is not None:
            self._check_model("stages.filter_hard.filter_model", fm,
                              ": the hard subset comes from a model that is pretrained here")
        return self

    @model_validator(mode="after")
    def _preregistered(self) -> "Sweep":
        if self.preregistration is not None:
            preregistration.check(self.preregistration, self)
            self.stages.tables = {**self.stages.tables, "preregistration": self.preregistration.model_dump()}
        return self

    @model_validator(mode="after")
    def _verl_cells(self) -> "Sweep":
        # a method verl cannot run, or a GPU cell that cannot fit its GPUs, is refused here,
        # not hours later in a pod (components/trainer/verl/cells.py; torch-free)
        from components.trainer.verl.cells import check

        check(self)
        return self

    # ---- derived views used by the DAG factory ----
    def task_of(self, method: str) -> str | None:
        """The task ``method``'s train stage runs (its ``task`` param; None = math)."""
        return {**self.stages.train, **self.method_train.get(method, {})}.get("task")

    def teacher_of(self, method: str) -> str | None:
        """The model whose pretrain output is ``method``'s teacher (``method_config.<m>.teacher``)."""
        return self.method_config.get(method, {}).get("teacher")

    def hard_model(self, model: str) -> str:
        """The model whose filter_hard output is ``model``'s hard subset: the sweep's one
        ``stages.filter_hard.filter_model`` when set, else ``model`` itself."""
        return self.stages.filter_hard.get("filter_model") or model

    def filter_params(self, model: str) -> dict[str, Any]:
        """stages.filter_hard, reading ``model``'s mixture where ``model_data`` names one."""
        name = self.model_data.get(model)
        return {**self.stages.filter_hard, **({"data_mixture": name} if name else {})}

    def filter_models(self) -> list[str]:
        """What filter_hard runs for: the one filter model, or every model."""
        return list(dict.fromkeys(self.hard_model(m) for m in self.models))

    def pretrained_models(self) -> list[str]:
        """What the pretrain stage runs for: ``models``, then each of ``teachers`` that a method
        of this run distils from (a run of a subset of the methods skips an unused teacher)."""
        used = {self.teacher_of(m) for m in self.methods}
        return [*self.models, *(t for t in self.teachers if t in used)]

    def pretrain_params(self, model: str) -> dict[str, Any]:
        """stages.pretrain + model_specs[model]; an unnamed model (path / HF id) is
        passed to the pretrain stage as ``{"model": <name>}``."""
        extra = self.model_specs.get(model, {"model": model})
        return {**self.stages.pretrain, **extra}

    def train_params(self, method: str, seed: int, model: str | None = None) -> dict[str, Any]:
        """stages.train < model_train[model] < method_train[method], plus the cell's method,
        seed and method config."""
        return {**self.stages.train, **self.model_train.get(model, {}), **self.method_train.get(method, {}),
                "method": method, "seed": seed,
                "method_config": dict(self.method_config.get(method, {}))}

    def evaluate_params(self, label: str, benchmark: str | None = None) -> dict[str, Any]:
        """stages.evaluate + label (+ ``benchmark`` when evaluating on one; + ``base_name``, the
        tables' row name, for a teacher's evaluation)."""
        out = {**self.stages.evaluate, "label": label}
        teacher = {k: src for k, m, src in self._untrained_evals() if src != m}.get(label.split("@")[0])
        if teacher is not None:
            out["base_name"] = f"teacher-{slug(teacher)}"
        return {**out, "benchmark": benchmark} if benchmark is not None else out

    def _untrained_evals(self) -> list[tuple[str, str, str]]:
        """(eval key, the model whose held-out set is scored, the model whose pretrain output
        scores it): each model's base, and each teacher a method of this run uses on each
        model's set (the distillation's ceiling beside the students' rows)."""
        teachers = [t for t in self.pretrained_models() if t not in self.models]
        return [(f"{slug(m)}-base", m, m) for m in self.models] + \
            [(f"{slug(m)}-teacher-{slug(t)}", m, t) for m in self.models for t in teachers]

    def untrained_eval_models(self) -> dict[str, str]:
        """Eval key -> the model whose pretrain output that evaluation scores."""
        return {k: src for k, _, src in self._untrained_evals()}

    def eval_targets(self) -> list[str | None]:
        """What each model is evaluated on: None = the held-out split, then each benchmark."""
        return ([None] if self.heldout_eval else []) + list(self.benchmarks)

    def eval_cells(self) -> list[dict[str, Any]]:
        """(each trained model + each base model + each used teacher) x eval_targets(), in DAG
        order: ``{"key", "model", "benchmark", "label"}``; ``label`` is the key, or
        ``"<key>@<benchmark>"`` on a benchmark. ``key`` is a grid key or a key of
        ``untrained_eval_models()``; ``model`` is the model whose held-out set is scored."""
        keys = [(g["key"], g["model"]) for g in self.grid()] + [(k, m) for k, m, _ in self._untrained_evals()]
        return [{"key": k, "model": m, "benchmark": b, "label": k if b is None else f"{k}@{b}"}
                for k, m in keys for b in self.eval_targets()]

    def grid(self) -> list[dict[str, Any]]:
        """model x method x seed in file order; ``key`` is a short stable slug."""
        return [{"model": m, "method": meth, "seed": s, "key": f"{slug(m)}-{meth}-s{s}"}
                for m in self.models for meth in self.methods for s in self.seeds]


def sweep_digest(cfg: Sweep) -> str:
    """Short digest of the validated sweep: tells whether a parsed DAG reflects a file."""
    import hashlib
    import json
    blob = json.dumps(cfg.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def parse_sweep(data: Any, file: str = "<sweep>") -> Sweep:
    if not isinstance(data, dict):
        raise SweepError(f"{file}: <root>: expected a mapping of sweep fields, got {type(data).__name__}")
    try:
        return Sweep.model_validate(data)
    except ValidationError as e:
        field, problem = validation_problem(e)
        raise SweepError(one_line(f"{file}: {field}: {problem}")) from None


def load_sweep(path: str | Path) -> Sweep:
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise SweepError(f"{file}: <file>: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "yaml"
        problem = getattr(e, "problem", None) or str(e)
        raise SweepError(one_line(f"{file}: {where}: YAML syntax error: {problem}")) from None
    return parse_sweep(data, file)
