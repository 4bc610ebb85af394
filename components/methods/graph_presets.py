"""VIP, VIGOR and GRESO with the graph difficulty estimator (``difficulty: graph``) as
registered presets, so a sweep can run each beside its own-estimate original
(``components.methods.difficulty_graph`` has the estimator and what each method does with it).
Each preset adds the estimator's prediction error on the step's observed pass rates
(``GraphDifficulty.prediction_error``: cold start and staleness, against the per-prompt
estimate) to its step stats, logged as ``method/graph_mae`` etc."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from components.methods.greso import GRESO, GRESOConfig
from components.methods.vigor import VIGOR, VIGORConfig
from components.methods.vip import VIP, VIPConfig

_GRAPH = Field("graph", description="own estimate, or the graph estimator")


def _with_error(stats: dict[str, float], graph) -> dict[str, float]:
    return stats if graph is None else {**stats, **graph.last_error}


class VIPGraphConfig(VIPConfig):
    difficulty: Literal["own", "graph"] = _GRAPH


class VIPGraph(VIP):
    name = "vip_graph"
    Config = VIPGraphConfig

    def step_stats(self) -> dict[str, float]:
        return _with_error(super().step_stats(), self.graph)


class VIGORGraphConfig(VIGORConfig):
    difficulty: Literal["own", "graph"] = _GRAPH


class VIGORGraph(VIGOR):
    name = "vigor_graph"
    Config = VIGORGraphConfig

    def step_stats(self) -> dict[str, float]:
        return _with_error(super().step_stats(), self.graph)


class GRESOGraphConfig(GRESOConfig):
    difficulty: Literal["own", "graph"] = _GRAPH


class GRESOGraph(GRESO):
    name = "greso_graph"
    Config = GRESOGraphConfig

    def step_stats(self) -> dict[str, float]:
        return _with_error(super().step_stats(), self.graph)
