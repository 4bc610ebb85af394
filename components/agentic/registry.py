"""Episodic method registry: name -> "module:Class", imported lazily so that listing the
episodic methods (validation of a ``task: agentic`` sweep, DAG parsing) never imports torch.

The names are the math registry's (``components.methods.registry``) where a rule has both
forms, so a sweep's ``methods`` list means the same on either task; a method without an
episodic form (sft, dapo, ...) is not here, and one that is only episodic (trace) is only here.
"""
from __future__ import annotations

import importlib

_EPISODIC: dict[str, str] = {
    "grpo": "components.agentic.methods:Fresh",
    "vsr": "components.agentic.methods:EpisodicVSR",
    "vsr_no_scoring": "components.agentic.methods:EpisodicVSRNoScoring",
    "vsr_no_recency": "components.agentic.methods:EpisodicVSRNoRecency",
    "trace": "components.agentic.trace:TRACE",
}


def register(name: str, target: str) -> None:
    """Register an episodic method implemented elsewhere: ``register("mine", "pkg.mod:Cls")``."""
    _EPISODIC[name] = target


def available() -> list[str]:
    return sorted(_EPISODIC)


def method_class(name: str) -> type:
    """The class behind ``name``; KeyError naming the episodic methods when there is none."""
    if name not in _EPISODIC:
        raise KeyError(f"method {name!r} has no episodic form (episodic methods: {', '.join(available())})")
    mod, _, attr = _EPISODIC[name].partition(":")
    cls = getattr(importlib.import_module(mod), attr)
    missing = [a for a in ("Config", "starts", "observe", "episodes_per_step", "state_dict", "load_state_dict")
               if not hasattr(cls, a)]
    if not isinstance(cls, type) or missing:
        raise TypeError(f"episodic method {name!r} ({_EPISODIC[name]}) lacks {', '.join(missing) or 'a class'}")
    return cls
