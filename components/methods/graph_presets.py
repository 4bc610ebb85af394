"""VIP, VIGOR and GRESO with the graph difficulty estimator (``difficulty: graph``) as
registered presets, so a sweep can run each beside its own-estimate original
(``components.methods.difficulty_graph`` has the estimator and what each method does with it)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from components.methods.greso import GRESO, GRESOConfig
from components.methods.vigor import VIGOR, VIGORConfig
from components.methods.vip import VIP, VIPConfig

_GRAPH = Field("graph", description="own estimate, or the graph estimator")


class VIPGraphConfig(VIPConfig):
    difficulty: Literal["own", "graph"] = _GRAPH


class VIPGraph(VIP):
    name = "vip_graph"
    Config = VIPGraphConfig


class VIGORGraphConfig(VIGORConfig):
    difficulty: Literal["own", "graph"] = _GRAPH


class VIGORGraph(VIGOR):
    name = "vigor_graph"
    Config = VIGORGraphConfig


class GRESOGraphConfig(GRESOConfig):
    difficulty: Literal["own", "graph"] = _GRAPH


class GRESOGraph(GRESO):
    name = "greso_graph"
    Config = GRESOGraphConfig
