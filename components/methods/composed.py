"""Composed allocators: VSR's state resampling inside VIGOR's rounds and inside VIP's budget.

None of the papers tries these; every rule here is ours [ours], built from the parts the
single methods already have (docs/methods.md §4 for VSR, §2 and §3 for VIP and VIGOR).

Allocation units. A step's ``B`` units are ``B - k`` fresh prompts (the first ones of the
batch, as VSR) and ``k = round(rho x B)`` replayed prefix states, drawn from VSR's buffer
with VSR's own rule (probability ~ sigma_hat, without replacement; fewer when the buffer
has fewer states, and the batch's next prompts fill the rest). A replayed state is one more
allocation unit: its context is prompt + prefix, its group's samples are continuations, and
its success estimate is VSR's p_hat(s) = (1 - alpha) p0(x) + alpha, alpha = cut / |tau|.

- ``vigor_vsr``: VIGOR's progressive rounds over the B units. Round 0 gives every unit m0
  samples; each later round keeps the top-alpha units by the Bernoulli variance of all their
  samples so far, prompts and states alike, and gives them m0 gamma^t new samples. The budget
  is VIGOR's for B units (T x m0 x B = 8B by default), shared by observed variance only:
  p_hat(s) does not enter (VIGOR has no prediction).
- ``vip_vsr``: VIP's allocation over the B units with C = budget_per_prompt x B (= 8B). A
  fresh prompt's a = p(1-p) with p from VIP's GP; a state's a = p_hat(s)(1 - p_hat(s)) from
  VSR's score. VIP's ``allocate`` shares C among all units in one optimisation, so a state
  competes with the prompts for the same budget. Only fresh groups update VIP's GP (a replayed
  state is not its prompt); every group updates VSR's buffer and p0 (VSR's ``observe``).

Config: the two parts' own config models, nested (``vsr: {...}``, ``vigor: {...}`` /
``vip: {...}``); ``vsr.rho`` is the replay share and ``vsr.n`` is not used.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from pydantic import Field, model_validator

from components.data.schema import Problem
from components.methods.base import Group, MethodConfig, RolloutContext, Method
from components.methods.vigor import VIGOR, VIGORConfig, progressive_rounds
from components.methods.vip import VIP, VIPConfig, allocate
from components.methods.vsr import VSR, VSRConfig


# ---------------------------------------------------------------------------- shared parts
def replay_units(vsr: VSR, batch: Sequence[Problem], ctx: RolloutContext,
                 rng: np.random.Generator) -> tuple[list[tuple], list[float]]:
    """The step's B units as ``sample_groups`` items, and each unit's success estimate
    (NaN for a fresh prompt: the caller's own model predicts it)."""
    items, replays = vsr.plan_step(batch, ctx, rng)
    p_hat = [float("nan")] * len(items)
    for uid, cut, _ in replays:
        traj = vsr.buffer[uid]
        items.append(ctx.replay_item(vsr.problems[uid], traj.response_ids, cut))
        alpha = cut / len(traj.response_ids)
        p_hat.append((1.0 - alpha) * vsr.p0.get(uid, vsr.config.p0_default) + alpha)
    return items, p_hat


def _tag(groups: list[Group], p_hat: Sequence[float]) -> None:
    for g, p in zip(groups, p_hat):
        g.meta["unit"] = "state" if g.is_replay else "prompt"
        if g.is_replay:
            g.meta["p_hat_state"] = p


class _WithVSR(Method):
    def __init__(self, config):
        super().__init__(config)
        self.vsr = VSR(config.vsr)

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        self.vsr.setup(problems, resources)

    def observe(self, groups: list[Group]) -> None:
        self.vsr.observe(groups)

    def _stats(self, groups: list[Group]) -> None:
        states = [g for g in groups if g.is_replay]
        self.last_stats = {"units_state": float(len(states)), "units_prompt": float(len(groups) - len(states)),
                           "rollouts_state": float(sum(g.n for g in states)),
                           "rollouts": float(sum(g.n for g in groups))}

    def step_stats(self) -> dict[str, float]:
        return {**self.last_stats, **self.vsr.step_stats()}

    def state_dict(self) -> dict[str, Any]:
        return {"vsr": self.vsr.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.vsr.load_state_dict(state["vsr"])


# ---------------------------------------------------------------------------- VIGOR x VSR
class VIGORVSRConfig(MethodConfig):
    vsr: VSRConfig = Field(default_factory=VSRConfig)
    vigor: VIGORConfig = Field(default_factory=VIGORConfig)

    @model_validator(mode="after")
    def _variance_rounds(self):
        if self.vigor.selection != "variance":     # progressive_rounds ranks by variance only
            raise ValueError(f"vigor.selection {self.vigor.selection!r}: vigor_vsr's rounds are variance-based")
        return self


class VIGORVSR(_WithVSR):
    name = "vigor_vsr"
    Config = VIGORVSRConfig

    def __init__(self, config: VIGORVSRConfig):
        super().__init__(config)
        self.vigor = VIGOR(config.vigor)

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        items, p_hat = replay_units(self.vsr, batch, ctx, rng)
        groups = progressive_rounds(items, self.vigor.schedule(len(items)), ctx, rng)
        _tag(groups, p_hat)
        self._stats(groups)
        return groups

    def rollouts_per_step(self, batch_size: int) -> int:
        return self.vigor.rollouts_per_step(batch_size)


# ---------------------------------------------------------------------------- VIP x VSR
class VIPVSRConfig(MethodConfig):
    vsr: VSRConfig = Field(default_factory=VSRConfig)
    vip: VIPConfig = Field(default_factory=VIPConfig)


class VIPVSR(_WithVSR):
    name = "vip_vsr"
    Config = VIPVSRConfig

    def __init__(self, config: VIPVSRConfig, embedder=None):
        super().__init__(config)
        self.vip = VIP(config.vip, embedder=embedder)

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        self.vsr.setup(problems, resources)
        self.vip.setup(problems, resources)

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        c = self.config.vip
        items, p_hat = replay_units(self.vsr, batch, ctx, rng)
        fresh = [it[0] for it, p in zip(items, p_hat) if np.isnan(p)]
        p_fresh = iter(self.vip.predict(fresh).tolist()) if fresh else iter(())
        p = np.array([next(p_fresh) if np.isnan(q) else q for q in p_hat])
        a = p * (1.0 - p)
        ns = allocate(a, c.budget_per_prompt * len(items), c.L, c.max_n, c.base)
        groups = ctx.sample_groups(items, ns)
        _tag(groups, p_hat)
        for g, pi, ni in zip(groups, p.tolist(), ns):
            g.meta.update(vip_p=pi, vip_n=ni)
        self._stats(groups)
        self.last_stats.update(self.vip.objective_stats(a, ns))
        return groups

    def observe(self, groups: list[Group]) -> None:
        self.vip.observe(groups)          # skips replayed groups
        self.vsr.observe(groups)

    def rollouts_per_step(self, batch_size: int) -> int:
        return self.config.vip.budget_per_prompt * batch_size

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "vip": self.vip.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.vip.load_state_dict(state["vip"])
