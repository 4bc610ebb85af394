"""VIGOR: progressive rollout allocation (docs/methods.md §3).

Source: Jiang et al. 2026, "Learning as Reasoning Unfolds: Progressive Rollout Allocation"
(arXiv 2607.22002), known from a summary of the paper and survey notes [SEC]; no primary text
or code. Rule: every prompt starts with ``m0`` rollouts; in rounds t = 1..T-1 the fraction
``alpha`` of groups with the highest observed reward variance is expanded by ``gamma``.

Budget-consistent reading [INF] (docs/methods.md): the active set of round t is the top-alpha
subset of round t-1's active set; each active prompt gets ``m0 * gamma**t`` *new*
rollouts. With alpha*gamma = 1 each round costs B*m0 and a step T*B*m0 (m0=2, T=4: 8 per
prompt, GRPO n=8's budget).

Open choices, as config knobs [INF]:
- active-set size a_t = ``rounding``(alpha * a_{t-1}) with a_0 = B; ``"ceil"`` (default:
  at least one prompt is expanded every round) or ``"floor"`` (a round with a_t = 0 is
  skipped, and so are all later ones). Exactly alpha^t * B, and exactly T*m0 per prompt on
  average, when B is divisible by gamma^(T-1) (B = 8, 16, ... for the defaults); otherwise
  ``rollouts_per_step(B)`` (the sum of a_t * m0 * gamma^t) says what a step generates;
- variance = Bernoulli variance p(1-p) of p = mean of all the prompt's rewards so far
  (clipped to [0, 1]); ties (e.g. the many zero-variance groups at m0 = 2) broken
  uniformly at random with the step's rng;
- all of a prompt's rollouts (every round) form ONE group with the prompt's uid, so the
  trainer's advantage is computed over all of them; ``meta["rounds"]`` counts the rounds
  the prompt was active, ``meta["round_of_sample"]`` gives each sample's round;
- round t samples with seed offset t, so rounds draw different samples.

The selection rule of rounds t >= 1 is a knob (``selection``), for the paper's ablation
(Section 5.3, Figure 5 left: "variance-based selection (VIGOR) with difficulty-based and random
selection ... under the same training setting"): ``variance`` (the paper's), ``random`` (a
uniform draw of the active set) or ``difficulty`` (the lowest observed success rate first
[INF]: the text names the rule, not its score). The schedule, and so the budget, is the same;
registered as ``vigor_random`` / ``vigor_difficulty``.

``speedup(k)`` is the paper's gain under a Pareto(k) tail of per-prompt variance:
eta = sum_{i<T} (gamma * alpha^(1-1/k))^i / sum_{i<T} (alpha*gamma)^i, tau = eta^(1/3).
"""
from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from components.data.schema import Problem
from components.methods.base import Group, Method, RolloutContext
from components.methods.difficulty_graph import DifficultyChoice, graph_error, graph_estimator, posterior_variance


def speedup(k: float, T: int = 4, gamma: float = 2.0, alpha: float = 0.5) -> tuple[float, float]:
    """(eta, tau) of docs/methods.md §3 for a Pareto(k) variance tail (k > 0)."""
    if k <= 0:
        raise ValueError("k must be > 0")
    num = sum((gamma * alpha ** (1.0 - 1.0 / k)) ** i for i in range(T))
    den = sum((alpha * gamma) ** i for i in range(T))
    eta = num / den
    return eta, eta ** (1.0 / 3.0)


class VIGORConfig(DifficultyChoice):   # difficulty: graph = rank by posterior_variance with the graph's p as prior
    m0: int = Field(2, ge=1, description="rollouts per prompt in round 0")
    T: int = Field(4, ge=1, description="rounds")
    gamma: float = Field(2.0, ge=1.0, description="expansion factor per round")
    alpha: float = Field(0.5, gt=0.0, le=1.0, description="fraction of the active set kept each round")
    rounding: Literal["ceil", "floor"] = "ceil"
    selection: Literal["variance", "random", "difficulty"] = Field(
        "variance", description="which active prompts a round expands: highest variance (the paper), a uniform "
                                "draw, or lowest success rate (its ablation, Figure 5 left)")

    @model_validator(mode="after")
    def _selection_on_own_estimate(self):
        if self.selection != "variance" and self.difficulty != "own":
            raise ValueError(f"selection {self.selection!r} ranks by the prompt's own rollouts; "
                             f"difficulty {self.difficulty!r} changes only the variance-based rule")
        return self


def bernoulli_var(rewards: Sequence[float]) -> float:
    if not rewards:
        return 0.0
    p = min(max(float(np.mean(rewards)), 0.0), 1.0)
    return p * (1.0 - p)


class VIGOR(Method):
    name = "vigor"
    Config = VIGORConfig

    def __init__(self, config: VIGORConfig):
        super().__init__(config)
        self.graph = graph_estimator(config)
        self.step = 0

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        if self.graph is not None:
            self.graph.fit_pool(problems)

    def schedule(self, batch_size: int) -> list[tuple[int, int]]:
        """[(active prompts a_t, new rollouts per active prompt)] for rounds t = 0..T-1."""
        c, out, a = self.config, [], batch_size
        for t in range(c.T):
            if t > 0:
                x = c.alpha * a
                a = min(a, math.ceil(x - 1e-9) if c.rounding == "ceil" else math.floor(x + 1e-9))
            if a <= 0:
                break
            out.append((a, int(round(c.m0 * c.gamma ** t))))
        return out

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        self.step = ctx.step
        prior = None if self.graph is None else self.graph.predict([p.uid for p in batch])

        def score(active: list[int], merged: list[Group]) -> np.ndarray:
            var = np.array([bernoulli_var(merged[i].rewards) if prior is None else
                            posterior_variance(prior[i], merged[i].rewards, self.config.graph.own_evidence)
                            for i in active])
            return self._score(var, [merged[i].rewards for i in active])
        return progressive_rounds(ctx.prompt_items(batch), self.schedule(len(batch)), ctx, rng, score)

    def _score(self, var: np.ndarray, rewards: list) -> np.ndarray:
        """Higher is expanded first, ties at random: the variance, nothing (random), or the
        failure rate (difficulty)."""
        if self.config.selection == "variance":
            return var
        if self.config.selection == "random":
            return np.zeros(len(var))
        return np.array([1.0 - float(np.mean(r)) for r in rewards])

    def rollouts_per_step(self, batch_size: int) -> int:
        return sum(a * per for a, per in self.schedule(batch_size))

    def observe(self, groups: list[Group]) -> None:
        if self.graph is not None:
            self.graph.observe_groups(groups, self.step)

    def step_stats(self) -> dict[str, float]:
        return graph_error(self.graph)

    def state_dict(self) -> dict[str, Any]:
        return {} if self.graph is None else {"step": self.step, "graph": self.graph.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.graph is not None:
            self.step = int(state["step"])
            self.graph.load_state_dict(state["graph"])


def progressive_rounds(items: Sequence[tuple], schedule: Sequence[tuple[int, int]], ctx: RolloutContext,
                       rng: np.random.Generator, score=None) -> list[Group]:
    """VIGOR's rounds over any units (``sample_groups`` items): round t samples ``per`` more for
    the top ``a`` units by ``score(active, merged)`` (default: the Bernoulli variance of their
    samples so far), ties at random. One group per unit; a later round appends its samples and
    records the round (``meta["rounds"]``, ``meta["round_of_sample"]``)."""
    merged: list[Group] = []
    active = list(range(len(items)))
    for t, (a, per) in enumerate(schedule):
        if t > 0:
            s = np.array([bernoulli_var(merged[i].rewards) for i in active]) if score is None else score(active, merged)
            order = np.lexsort((rng.random(len(active)), -s))
            active = sorted(active[j] for j in order[:a])
        for i, g in zip(active, ctx.sample_groups([items[i] for i in active], per, seed_offset=t)):
            if t == 0:
                g.meta.update(rounds=1, round_of_sample=[0] * g.n)
                merged.append(g)
            else:
                merged[i].add_round(g, t)
                merged[i].meta["rounds"] = t + 1
    return merged
