"""The one method registry, for every task: name -> entry (class, tasks, config overrides).

Entries are imported lazily, so listing methods and checking a method against a task (sweep
validation, DAG parsing) never imports torch. A preset is an entry, not a subclass: the VSR
ablations are VSR with other config defaults, the graph presets VIP / VIGOR / GRESO with
``difficulty: graph``. ``task_overrides`` holds a method's defaults on one task (the VSR paper
starts agentic runs from an empty buffer: no expert seeding).

    build("vsr_no_scoring", {"n": 4}, task="agentic")
    register("mine", "pkg.mod:Mine", tasks=("math", "agentic"))   # a plug-in
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Mapping

TASKS = ("math", "agentic")
BOTH = TASKS
MATH = ("math",)


@dataclass(frozen=True)
class Entry:
    target: str                                   # "module:Class", a Method subclass
    tasks: tuple[str, ...] = MATH                 # the tasks the method applies to
    overrides: Mapping[str, Any] = field(default_factory=dict)
    task_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


_VSR = "components.methods.vsr:VSR"
_VSR_EPISODES = {"agentic": {"expert_seed": False}}

_METHODS: dict[str, Entry] = {
    "grpo": Entry("components.methods.grpo:GRPO", BOTH),
    "vsr": Entry(_VSR, BOTH, task_overrides=_VSR_EPISODES),
    # the VSR paper's ablations (Figure 6) and its static expert-prefix control
    "vsr_no_scoring": Entry(_VSR, BOTH, {"scoring": "uniform"}, _VSR_EPISODES),
    "vsr_no_recency": Entry(_VSR, BOTH, {"freeze_after": 10}, _VSR_EPISODES),
    "static_prefix": Entry(_VSR, MATH, {"scoring": "uniform", "online_insert": False, "window_steps": None}),
    "sft": Entry("components.methods.sft:SFT"),
    "dapo": Entry("components.methods.dapo:DAPO"),
    "pods": Entry("components.methods.pods:PODS"),
    "reinforce_ada_est": Entry("components.methods.reinforce_ada:ReinforceAdaEst"),
    "reinforce_ada_seq": Entry("components.methods.reinforce_ada:ReinforceAdaSeq"),
    "vigor": Entry("components.methods.vigor:VIGOR"),
    # VIGOR's selection ablation (its Figure 5, left): the same rounds and budget, other rankings
    "vigor_random": Entry("components.methods.vigor:VIGOR", MATH, {"selection": "random"}),
    "vigor_difficulty": Entry("components.methods.vigor:VIGOR", MATH, {"selection": "difficulty"}),
    "greso": Entry("components.methods.greso:GRESO"),
    "vip": Entry("components.methods.vip:VIP"),
    "rl_zvp": Entry("components.methods.rl_zvp:RLZVP"),
    "sara": Entry("components.methods.sara:SARA"),
    "sara_dps": Entry("components.methods.sara:SARADPS"),
    "cero": Entry("components.methods.cero:CERO", BOTH),
    "pair": Entry("components.methods.pair:PAIR"),
    "vigor_vsr": Entry("components.methods.composed:VIGORVSR"),
    "vip_vsr": Entry("components.methods.composed:VIPVSR"),
    "rail": Entry("components.methods.rail:RAIL"),
    "pg_opd": Entry("components.methods.pg_opd:PGOPD"),
    # plain on-policy distillation: PG-OPD with every candidate decoded to full length
    "opd": Entry("components.methods.pg_opd:PGOPD", MATH, {"prune": False}),
    # the graph difficulty estimator in place of each method's own estimate
    "vip_graph": Entry("components.methods.vip:VIP", MATH, {"difficulty": "graph"}),
    "vigor_graph": Entry("components.methods.vigor:VIGOR", MATH, {"difficulty": "graph"}),
    "greso_graph": Entry("components.methods.greso:GRESO", MATH, {"difficulty": "graph"}),
    "trace": Entry("components.methods.trace:TRACE", ("agentic",)),
}


def register(name: str, target: str, tasks: tuple[str, ...] = MATH, overrides: Mapping[str, Any] | None = None,
             task_overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Register a method implemented elsewhere (a plug-in) or a preset of a registered class."""
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        raise ValueError(f"register({name!r}): unknown task(s) {bad} (known: {', '.join(TASKS)})")
    _METHODS[name] = Entry(target, tuple(tasks), dict(overrides or {}), dict(task_overrides or {}))


def available(task: str | None = None) -> list[str]:
    """Every registered name, or those that apply to ``task``."""
    return sorted(n for n, e in _METHODS.items() if task is None or task in e.tasks)


def entry(name: str, task: str | None = None) -> Entry:
    """``name``'s entry; KeyError naming the known methods, or the task's, when there is none."""
    if name not in _METHODS:
        raise KeyError(f"unknown method '{name}' (available: {', '.join(available())})")
    e = _METHODS[name]
    if task is not None and task not in e.tasks:
        raise KeyError(f"method '{name}' does not apply to task {task} (applies to: {', '.join(e.tasks)}; "
                       f"methods for {task}: {', '.join(available(task))})")
    return e


def method_class(name: str) -> type:
    e = entry(name)
    from components.methods.base import Method

    mod, _, attr = e.target.partition(":")
    cls = getattr(importlib.import_module(mod), attr)
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise TypeError(f"method '{name}' ({e.target}) does not subclass components.methods.base.Method")
    return cls


def method_config(name: str, config: Mapping[str, Any] | None = None, task: str = "math"):
    """``name``'s validated config on ``task``: the entry's overrides under the given keys
    (pydantic's ValidationError on a bad field)."""
    e = entry(name, task)
    return method_class(name).Config(**{**e.overrides, **e.task_overrides.get(task, {}), **(config or {})})


def build(name: str, config: Mapping[str, Any] | None = None, task: str = "math"):
    """Instantiate a method from its name and a config dict; ``method.name`` is the registered name."""
    method = method_class(name)(method_config(name, config, task))
    method.name = name
    return method
