"""Method registry: name -> "module:Class", imported lazily so that listing methods
(sweep validation, DAG parsing) never imports torch."""
from __future__ import annotations

import importlib
from typing import Any

_METHODS: dict[str, str] = {
    "grpo": "components.methods.grpo:GRPO",
    "vsr": "components.methods.vsr:VSR",
    "sft": "components.methods.sft:SFT",
    "vsr_no_scoring": "components.methods.vsr:VSRNoScoring",
    "vsr_no_recency": "components.methods.vsr:VSRNoRecency",
    "static_prefix": "components.methods.vsr:StaticPrefix",
    # allocation baselines
    "dapo": "components.methods.dapo:DAPO",
    "pods": "components.methods.pods:PODS",
    "reinforce_ada_est": "components.methods.reinforce_ada:ReinforceAdaEst",
    "reinforce_ada_seq": "components.methods.reinforce_ada:ReinforceAdaSeq",
    "vigor": "components.methods.vigor:VIGOR",
    "greso": "components.methods.greso:GRESO",
    "vip": "components.methods.vip:VIP",
    "rl_zvp": "components.methods.rl_zvp:RLZVP",
    "sara": "components.methods.sara:SARA", "sara_dps": "components.methods.sara:SARADPS",
    "cero": "components.methods.cero:CERO", "pair": "components.methods.pair:PAIR",
    "vigor_vsr": "components.methods.composed:VIGORVSR", "vip_vsr": "components.methods.composed:VIPVSR",
    "rail": "components.methods.rail:RAIL",
    "pg_opd": "components.methods.pg_opd:PGOPD", "opd": "components.methods.pg_opd:OPD",
    "vip_graph": "components.methods.graph_presets:VIPGraph",
    "vigor_graph": "components.methods.graph_presets:VIGORGraph",
    "greso_graph": "components.methods.graph_presets:GRESOGraph",
}


def register(name: str, target: str) -> None:
    """Register a method implemented elsewhere (a plug-in): ``register("mine", "pkg.mod:Cls")``."""
    _METHODS[name] = target


def available() -> list[str]:
    return sorted(_METHODS)


def method_class(name: str) -> type:
    if name not in _METHODS:
        raise KeyError(f"unknown method '{name}' (available: {', '.join(available())})")
    from components.methods.base import Method

    mod, _, attr = _METHODS[name].partition(":")
    cls = getattr(importlib.import_module(mod), attr)
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise TypeError(f"method '{name}' ({_METHODS[name]}) does not subclass components.methods.base.Method")
    return cls


def build(name: str, config: dict[str, Any] | None = None):
    """Instantiate a method from its name and a config dict (validated by its Config model)."""
    cls = method_class(name)
    return cls(cls.Config(**(config or {})))
