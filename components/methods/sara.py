"""SARA: Sequential Adaptive Rollout Allocation (from its abstract; no public code,
docs/methods.md §10). Each rule below names the abstract sentence it comes from; every
choice the abstract leaves open is a config knob marked [ours].

- "maintains a Beta posterior over each prompt's success rate": Beta(prior_a + S, prior_b + F)
  (:class:`~components.methods.posterior.BetaCounts`); counts carried across steps and
  multiplied by ``history_decay`` when new outcomes arrive [ours: 0.5; prior Beta(1, 1)].
- "evaluates a closed-form predictor of group effectiveness": :func:`p_effective` = P(the
  group of ``target`` samples has mixed rewards | posterior, the s successes and f failures
  sampled so far). Mixed already -> 1; otherwise, with r = target - (s + f) samples left,
  1 - [f = 0] E[p^r] - [s = 0] E[(1-p)^r] under Beta(a + s, b + f) (Beta moments in closed form).
- "a two-threshold, SPRT-style rule that commits effective groups, abandons saturated ones
  after a short probe": :func:`decide`. After each sequential round: P_eff >= ``commit`` ->
  commit (fill the group to its target); P_eff <= ``abandon`` -> abandon (its samples are
  discarded, metered as ``discarded``); otherwise sample ``step_size`` more and decide again.
  The thresholds act on the log-odds of P_eff like SPRT's A and B [ours: commit 0.9,
  abandon 0.5; probe 2 samples, then 2 at a time].
- "reallocates the freed budget to fresh prompts, without any extra prediction rollouts":
  the step's budget is ``n x B`` rollouts. Each open prompt reserves what it may still need
  (target minus samples so far); what no open prompt reserves is given to fresh prompts drawn
  (with the step's rng) from the training problems not yet used this step, each with target
  n (the last one gets the remainder when it is >= ``min_group``). Probe samples are part of
  the group (no separate prediction rollouts). A step therefore generates at most n x B
  rollouts, exactly n x B unless the pool of unused prompts or ``max_rounds`` runs out
  (``last_stats["rollouts"]`` says what it generated).
- Returned: the committed groups (one group per prompt, all its rounds merged,
  ``meta["round_of_sample"]``). At ``max_rounds`` an open prompt is abandoned if its rewards
  are all equal and returned if they are mixed.

SARA + DPS ("composing SARA with DPS yields the best accuracy"): DPS (Dynamics-Predictive
Sampling) selects prompts *before* sampling from a predictive prior of their difficulty.
:class:`SARADPS` puts such a selector in front of SARA: every time SARA takes prompts
(the batch, and each refill) it looks at ``dps_candidates`` times as many candidates and
keeps those whose Thompson draw p ~ Beta(posterior) is closest to ``dps_target`` (0.5).
DPS's own predictor is a hidden Markov model of solving progress; ours is SARA's decayed
Beta posterior (a MoPPS-style stand-in) [ours].
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from pydantic import Field, model_validator

from components.data.schema import Problem
from components.methods.base import Group, MethodConfig, RolloutContext, Method
from components.methods.dapo import discard, draw_unused
from components.methods.posterior import BetaCounts, beta_moment


# ---------------------------------------------------------------------------- the core rule
def p_effective(a: float, b: float, s: int, f: int, target: int) -> float:
    """P(a group of ``target`` samples has mixed rewards) given Beta(a, b) before the group
    and ``s`` successes, ``f`` failures among its first s + f samples."""
    if s > 0 and f > 0:
        return 1.0
    r = target - s - f
    if r <= 0:
        return 0.0
    pa, pb = a + s, b + f
    p = 1.0
    if f == 0:
        p -= float(beta_moment(pa, pb, r, 0))
    if s == 0:
        p -= float(beta_moment(pa, pb, 0, r))
    return max(p, 0.0)


def decide(p_eff: float, commit: float, abandon: float) -> str:
    """SPRT-style two thresholds on P_eff: "commit", "abandon" or "continue"."""
    if p_eff >= commit:
        return "commit"
    if p_eff <= abandon:
        return "abandon"
    return "continue"


def dps_select(params: Sequence[tuple[float, float]], k: int, rng: np.random.Generator,
               target: float = 0.5) -> list[int]:
    """Indices of the ``k`` candidates whose Thompson draw p ~ Beta(a, b) is closest to
    ``target`` (ties by index), in candidate order."""
    if k >= len(params):
        return list(range(len(params)))
    draws = np.array([rng.beta(a, b) for a, b in params])
    order = np.lexsort((np.arange(len(draws)), np.abs(draws - target)))
    return sorted(order[:k].tolist())


# ---------------------------------------------------------------------------- the method
class SARAConfig(MethodConfig):
    n: int = Field(8, ge=2, description="target group size; the step's budget is n x batch")
    probe: int = Field(2, ge=1, description="first samples of a prompt before any decision [ours]")
    step_size: int = Field(2, ge=1, description="samples per later sequential round [ours]")
    commit: float = Field(0.9, gt=0.0, le=1.0, description="commit when P_eff >= this [ours]")
    abandon: float = Field(0.5, ge=0.0, lt=1.0, description="abandon when P_eff <= this [ours]")
    prior_a: float = Field(1.0, gt=0.0)
    prior_b: float = Field(1.0, gt=0.0)
    history_decay: float = Field(0.5, ge=0.0, le=1.0, description="old counts x this per new visit [ours]")
    success_threshold: float = 0.5
    min_group: int = Field(2, ge=2, description="smallest target of a refill prompt [ours]")
    max_rounds: int = Field(12, ge=1, description="sequential rounds per step at most [ours]")

    @model_validator(mode="after")
    def _order(self):
        if self.abandon >= self.commit:
            raise ValueError(f"abandon ({self.abandon}) must be below commit ({self.commit})")
        return self


class _Unit:
    __slots__ = ("prob", "target", "group", "state")

    def __init__(self, prob: Problem, target: int):
        self.prob, self.target, self.group, self.state = prob, target, None, "open"

    @property
    def m(self) -> int:
        return 0 if self.group is None else self.group.n


class SARA(Method):
    name = "sara"
    Config = SARAConfig

    def __init__(self, config: SARAConfig):
        super().__init__(config)
        c = config
        self.post = BetaCounts(c.prior_a, c.prior_b, c.history_decay, c.success_threshold)
        self.pool: list[Problem] = []
        self._pending: list[tuple[str, list[float]]] = []

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        self.pool = list(problems)

    # the prompts SARA takes: the batch as given, the first k refill draws (SARA + DPS overrides)
    def take_batch(self, batch: Sequence[Problem], rng: np.random.Generator) -> list[Problem]:
        return list(batch)

    def take(self, candidates: Sequence[Problem], k: int, rng: np.random.Generator) -> list[Problem]:
        return list(candidates)[:k]

    def _draw(self, k: int, used: set[str], rng: np.random.Generator, factor: int = 1) -> list[Problem]:
        return self.take(draw_unused(self.pool, k * factor, used, rng), k, rng) if k > 0 else []

    def _refill(self, free: int, used: set[str], rng: np.random.Generator) -> list[_Unit]:
        c = self.config
        targets = [c.n] * (free // c.n) + ([free % c.n] if free % c.n >= max(c.min_group, 1) else [])
        probs = self._draw(len(targets), used, rng)
        used |= {p.uid for p in probs}
        return [_Unit(p, t) for p, t in zip(probs, targets)]

    def _decide(self, u: _Unit) -> str:
        s = sum(r > self.config.success_threshold for r in u.group.rewards)
        a, b = self.post.params(u.prob.uid)
        return decide(p_effective(a, b, s, u.m - s, u.target), self.config.commit, self.config.abandon)

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        c = self.config
        budget = c.n * len(batch)
        first = self.take_batch(batch, rng)
        used = {p.uid for p in batch} | {p.uid for p in first}
        units = [_Unit(p, c.n) for p in first]
        open_, done, dropped = list(units), [], []
        spent = rounds = 0
        while rounds < c.max_rounds:
            free = budget - spent - sum(u.target - u.m for u in open_)
            fresh = self._refill(free, used, rng)
            units += fresh
            open_ += fresh
            if not open_:
                break
            ks = [u.target - u.m if u.state == "commit" else min(c.probe if u.m == 0 else c.step_size,
                                                                   u.target - u.m) for u in open_]
            items = ctx.prompt_items([u.prob for u in open_])
            for u, g, k in zip(open_, ctx.sample_groups(items, ks, seed_offset=rounds), ks):
                spent += k
                if u.group is None:
                    g.meta["round_of_sample"] = [rounds] * g.n
                    u.group = g
                else:
                    u.group.add_round(g, rounds)
            rounds += 1
            still = []
            for u in open_:
                if u.state in ("open", "continue"):
                    u.state = self._decide(u)
                if u.state == "abandon":
                    dropped.append(u)
                elif u.m >= u.target:
                    done.append(u)
                else:
                    still.append(u)
            open_ = still
        for u in open_:                               # max_rounds reached
            (done if u.group is not None and u.group.mixed else dropped).append(u)
        dropped = [u for u in dropped if u.group is not None]
        discard(ctx, [u.group for u in dropped])
        self._pending = [(u.prob.uid, list(u.group.rewards)) for u in units if u.group is not None]
        for u in done:
            u.group.meta.update(sara_target=u.target, sara_decision=u.state)
        self.last_stats = {"rollouts": float(spent), "rounds": float(rounds), "committed": float(len(done)),
                           "abandoned": float(len(dropped)), "refill_prompts": float(len(units) - len(first)),
                           "abandoned_rollouts": float(sum(u.m for u in dropped))}
        return [u.group for u in sorted(done, key=lambda u: units.index(u))]

    def observe(self, groups: list[Group]) -> None:
        # every sampled prompt of the step, abandoned ones included (the trainer only sees the
        # committed groups)
        for uid, rewards in self._pending:
            self.post.add_rewards(uid, rewards)
        self._pending = []

    def rollouts_per_step(self, batch_size: int) -> int:
        """The step's budget n x B: an upper bound, reached unless the pool or max_rounds runs out."""
        return self.config.n * batch_size

    def state_dict(self) -> dict[str, Any]:
        return {"posterior": self.post.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.post.load_state_dict(state["posterior"])
        self._pending = []


class SARADPSConfig(SARAConfig):
    dps_candidates: int = Field(2, ge=1, description="candidates examined per prompt taken [ours]")
    dps_target: float = Field(0.5, gt=0.0, lt=1.0, description="Thompson draw closest to this wins [ours]")


class SARADPS(SARA):
    """SARA with a DPS-style pre-sampling selector on every prompt it takes."""
    name = "sara_dps"
    Config = SARADPSConfig

    def take_batch(self, batch: Sequence[Problem], rng: np.random.Generator) -> list[Problem]:
        extra = draw_unused(self.pool, (self.config.dps_candidates - 1) * len(batch), {p.uid for p in batch}, rng)
        return self.take(list(batch) + extra, len(batch), rng)

    def take(self, candidates: Sequence[Problem], k: int, rng: np.random.Generator) -> list[Problem]:
        cands = list(candidates)
        idx = dps_select([self.post.params(p.uid) for p in cands], k, rng, self.config.dps_target)
        return [cands[i] for i in idx]

    def _draw(self, k: int, used: set[str], rng: np.random.Generator, factor: int = 1) -> list[Problem]:
        return super()._draw(k, used, rng, factor=self.config.dps_candidates)
