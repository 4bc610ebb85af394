"""Methods on episodes: what to roll out each update (which start states, how many episodes).

The math methods (``components.methods``) choose prompts and token-prefix states; these choose
map seeds and turn-prefix states, under the same names, so a sweep's ``methods`` list means the
same thing on either task:

* ``grpo``: a group of ``n`` episodes from each map seed's initial state. With the GiGPO
  estimator (the agentic train stage's default) this is the paper's GiGPO baseline.
* ``vsr``: VSR on episodes (the VSR paper, section 5 and appendix D; ``docs/methods.md`` §4). The buffer holds the most
  recent successful episode of each map seed, the policy's own only (the paper uses no expert
  cold start on agentic tasks). A replay state is a turn prefix (seed, first i actions),
  0 < i < L, restored by replaying the environment. Score p_hat = (1 - alpha) p0 + alpha R with
  alpha = i / L, R = 1 (only successes are stored), p0 = the success rate of the seed's latest
  fresh group; sigma_hat = sqrt(p_hat (1 - p_hat)). A fraction ``rho`` of the batch's groups are
  replays drawn without replacement in proportion to sigma_hat; each gets a fresh group of
  ``n`` continuations; the replayed turns are context (no training row).
* ``vsr_no_scoring``: replay states drawn uniformly (the paper's BabyAI "uniform replay").
* ``vsr_no_recency``: the buffer fills for ``freeze_after`` updates and is then held fixed.
* ``trace``: TRACE (``components.agentic.trace``): groups go to map seeds and turn prefixes
  of recent episodes by a shared success predictor's p_hat (1 - p_hat).

Budget: every method generates ``n`` episodes per batch element (``episodes_per_step``).
The names are registered in ``components.agentic.registry`` (names only, no torch: sweep
validation reads them); a method without an episodic form (sft, dapo, ...) is refused by
:func:`build_episodic`.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from components.agentic.registry import available, method_class
from components.agentic.rollout import EpisodeRun, Start
from components.methods.base import MethodConfig
from components.methods.vsr import sigma_hat

__all__ = ["FreshConfig", "Fresh", "EpisodicVSRConfig", "EpisodicVSR", "EPISODIC", "build_episodic",
           "episodic_config"]


class FreshConfig(MethodConfig):
    n: int = Field(8, ge=1, description="episodes per map seed (verl-agent env.rollout.n = 8)")


class Fresh:
    name = "grpo"
    Config = FreshConfig

    def __init__(self, config: FreshConfig):
        self.config = config

    def setup(self, seeds: Sequence[int], resources: dict[str, Any]) -> None:
        pass

    def starts(self, batch: Sequence[int], step: int, rng: np.random.Generator) -> list[Start]:
        return [Start(int(s), (), f"{s}", self.config.n) for s in batch]

    def observe(self, runs: Sequence[EpisodeRun], step: int) -> None:
        pass

    def episodes_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.n

    def step_stats(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class EpisodicVSRConfig(MethodConfig):
    n: int = Field(8, ge=1, description="continuations per replay state / episodes per fresh seed")
    rho: float = Field(0.5, ge=0.0, le=1.0, description="fraction of the batch's groups that are replays")
    window_steps: int | None = Field(40, ge=1, description="recency window in updates (math VSR's default)")
    capacity: int = Field(100_000, ge=1, description="max buffered episodes (oldest evicted)")
    scoring: Literal["sigma", "uniform"] = "sigma"
    freeze_after: int | None = Field(None, ge=0, description="stop inserting/evicting after this update")
    insert_from_replay: bool = True
    p0_default: float = Field(0.0, ge=0.0, le=1.0)
    # off: the paper's agentic runs start from an empty buffer (no expert cold start)
    expert_seed: bool = False


@dataclass
class Buffered:
    seed: int
    actions: list[str]        # the whole successful episode from reset
    inserted_step: int


class EpisodicVSR:
    name = "vsr"
    Config = EpisodicVSRConfig

    def __init__(self, config: EpisodicVSRConfig):
        self.config = config
        self.buffer: dict[int, Buffered] = {}   # ordered by inserted_step (see _evict)
        self.p0: dict[int, float] = {}
        self.step = 0

    def setup(self, seeds: Sequence[int], resources: dict[str, Any]) -> None:
        for s, rate in (resources.get("p0") or {}).items():
            self.p0.setdefault(int(s), float(rate))
        if self.config.expert_seed and not self.buffer:
            allowed = {int(s) for s in seeds}
            for s, actions in sorted((resources.get("expert_traces") or {}).items(), key=lambda kv: int(kv[0])):
                if int(s) in allowed and len(actions) > 1:
                    self.buffer[int(s)] = Buffered(int(s), list(actions), 0)

    def _frozen(self) -> bool:
        return self.config.freeze_after is not None and self.step >= self.config.freeze_after

    def states(self) -> list[tuple[int, int, float]]:
        """Every replay state (seed, cut, score), cut = turns replayed, 0 < cut < episode length."""
        out = []
        for seed in sorted(self.buffer):
            L = len(self.buffer[seed].actions)
            p0 = self.p0.get(seed, self.config.p0_default)
            for cut in range(1, L):
                w = 1.0 if self.config.scoring == "uniform" else sigma_hat(p0, cut / L, 1.0)
                out.append((seed, cut, w))
        return out

    def select(self, k: int, rng: np.random.Generator) -> list[tuple[int, int, float]]:
        states = self.states()
        if k <= 0 or not states:
            return []
        k = min(k, len(states))
        w = np.array([s[2] for s in states], dtype=float)
        p = w / w.sum() if w.sum() > 0 else np.full(len(states), 1.0 / len(states))
        idx = rng.choice(len(states), size=k, replace=False, p=p) if k < len(states) else np.arange(k)
        return [states[i] for i in sorted(idx.tolist())]

    def starts(self, batch: Sequence[int], step: int, rng: np.random.Generator) -> list[Start]:
        self.step = step
        self._evict()
        replays = self.select(int(round(self.config.rho * len(batch))), rng)
        fresh = list(batch)[: len(batch) - len(replays)]
        out = [Start(int(s), (), f"{s}", self.config.n) for s in fresh]
        for seed, cut, w in replays:
            acts = self.buffer[seed].actions
            out.append(Start(seed, tuple(acts[:cut]), f"{seed}@{cut}", self.config.n,
                             (("alpha", cut / len(acts)), ("score", w))))
        return out

    def observe(self, runs: Sequence[EpisodeRun], step: int) -> None:
        self.step = step
        by_group: dict[str, list[EpisodeRun]] = {}
        for r in runs:
            by_group.setdefault(r.start.group_id(), []).append(r)
        for rs in by_group.values():
            s = rs[0].start
            if not s.prefix:
                self.p0[s.seed] = float(np.mean([r.won for r in rs]))
            if self._frozen() or (s.prefix and not self.config.insert_from_replay):
                continue
            wins = [r for r in rs if r.won]
            if wins:   # the most recent success replaces the seed's episode
                self.buffer.pop(s.seed, None)
                self.buffer[s.seed] = Buffered(s.seed, list(wins[-1].actions), step)
        self._evict()

    def _evict(self) -> None:
        if self._frozen():
            return
        w = self.config.window_steps
        if w is not None:
            for seed in [s for s, b in self.buffer.items() if self.step - b.inserted_step >= w]:
                del self.buffer[seed]
        while len(self.buffer) > self.config.capacity:
            del self.buffer[next(iter(self.buffer))]

    def episodes_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.n

    def step_stats(self) -> dict[str, float]:
        states = self.states()
        return {"buffer_episodes": float(len(self.buffer)), "buffer_states": float(len(states)),
                "buffer_mean_score": float(np.mean([s[2] for s in states])) if states else math.nan}

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": [asdict(b) for b in self.buffer.values()],
                "p0": {str(k): v for k, v in self.p0.items()}, "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        items = sorted((Buffered(**b) for b in state["buffer"]), key=lambda b: b.inserted_step)
        self.buffer = {b.seed: b for b in items}
        self.p0 = {int(k): float(v) for k, v in state["p0"].items()}
        self.step = int(state["step"])


class EpisodicVSRNoScoringConfig(EpisodicVSRConfig):
    scoring: Literal["sigma", "uniform"] = "uniform"


class EpisodicVSRNoScoring(EpisodicVSR):
    name = "vsr_no_scoring"
    Config = EpisodicVSRNoScoringConfig


class EpisodicVSRNoRecencyConfig(EpisodicVSRConfig):
    freeze_after: int | None = Field(10, ge=0, description="warm-up updates, then the buffer is frozen")


class EpisodicVSRNoRecency(EpisodicVSR):
    name = "vsr_no_recency"
    Config = EpisodicVSRNoRecencyConfig


def episodic_config(name: str, config: dict[str, Any] | None):
    """``name``'s validated config; ValueError when it has no episodic form (a bad field:
    pydantic's ValidationError, also a ValueError)."""
    try:
        cls = method_class(name)
    except KeyError as e:
        raise ValueError(e.args[0]) from None
    return cls.Config(**(config or {}))


def build_episodic(name: str, config: dict[str, Any] | None = None):
    return method_class(name)(episodic_config(name, config))


# name -> class of every registered episodic method. The registry (names only, for DAG parsing)
# is the one list; its entries that point into this module resolve to the classes above.
EPISODIC: dict[str, type] = {name: method_class(name) for name in available()}
