"""Reinforce-Ada-Est: estimator-guided rollout allocation (METHODS.md section 5b).

Source: Xiong et al., "Reinforce-Ada" (arXiv 2510.04996 v3), Algorithm 1 (the ``Est``
variant; the released RLHFlow/Reinforce-Ada code implements only ``Seq``):

1. p_hat_x from the Ada-EMA estimator: N_tot <- lam*N_tot + n_t, N_pos <- lam*N_pos + k_t,
   p_hat = (N_pos + a) / (N_tot + a + b);
2. N_x proportional to 1/sqrt(p_hat_x + eps), N_min <= N_x <= N_max, sum N_x = n_mean * B
   (``allocate``: bisection on the proportionality constant, then largest-remainder
   rounding within the bounds, so the sum is exact);
3. sample N_x responses; r_bar_x = their mean reward;
4. explicit weight alpha_x = 1/sqrt(r_bar_x + eps); advantage A_i = (r_i - r_bar_x) * alpha_x;
5. update the estimator (``observe``).

The trainer computes advantages itself. Step 4's weight is put in ``Group.meta["adv_weight"]``
(``weight_mode="meta"``, default): the trainer must multiply each sequence's advantage by its
group's ``adv_weight``. Use ``adv_estimator="drgrpo"`` for A_i = r_i - r_bar (the paper's form).
``weight_mode="rewards"`` instead multiplies the group's rewards by alpha_x, which gives the
same advantages with ``drgrpo``/``rloo`` (linear in r) and no trainer change, but scales the
logged rewards (the raw ones stay in ``meta["raw_rewards"]``); it is a no-op under ``grpo``.
``weight_mode="none"`` drops the weight (pure allocation ablation).

Open choices, as config knobs:
- ``lam`` = 0.9 [INF; NF in the paper]; the decay is applied to a prompt's counts each
  time that prompt is observed (not every step);
- prior Beta(a, b) = Beta(0.5, 0.5) [SEC: third-party re-implementation]; an unseen
  prompt has p_hat = a / (a + b) = 0.5;
- k_t = number of rewards > ``positive_threshold`` (0.5) [INF];
- ``eps`` = 1e-6 [INF] in both 1/sqrt(p_hat + eps) and 1/sqrt(r_bar + eps) (with a
  Beta prior p_hat > 0 anyway; with r_bar = 0 all advantages are 0 whatever the weight);
- ``n_mean`` = 8 ("hyper-parameter 8"), [n_min, n_max] = [4, 32] (seed).
"""
from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from components.data.schema import Problem
from components.methods.base import Group, MethodConfig, RolloutContext


def allocate(p_hat: Sequence[float], total: int, n_min: int, n_max: int, eps: float = 1e-6) -> list[int]:
    """Integers N_x in [n_min, n_max], sum exactly ``total``, N_x ~ c / sqrt(p_hat_x + eps).

    The continuous N_x(c) = clip(c * w_x, n_min, n_max) is found by bisection on c so that
    sum N_x(c) = total; then floor, and hand the remaining units one at a time to the largest
    fractional parts (ties: lowest index) among those below n_max.
    """
    B = len(p_hat)
    if B == 0:
        if total != 0:
            raise ValueError("allocate: no prompts but a non-zero total")
        return []
    if not (B * n_min <= total <= B * n_max):
        raise ValueError(f"allocate: total {total} outside [{B * n_min}, {B * n_max}] for {B} prompts")
    w = 1.0 / np.sqrt(np.clip(np.asarray(p_hat, dtype=float), 0.0, None) + eps)

    def cont(c: float) -> np.ndarray:
        return np.clip(c * w, n_min, n_max)

    lo, hi = 0.0, n_max / float(w.min())
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if cont(mid).sum() < total:
            lo = mid
        else:
            hi = mid
    x = cont(hi)
    n = np.clip(np.floor(x + 1e-9), n_min, n_max).astype(int)
    frac = x - n
    while n.sum() < total:
        cand = np.where(n < n_max, frac, -np.inf)
        i = int(np.argmax(cand))
        n[i] += 1
        frac[i] -= 1.0
    while n.sum() > total:
        cand = np.where(n > n_min, frac, np.inf)
        i = int(np.argmin(cand))
        n[i] -= 1
        frac[i] += 1.0
    return n.tolist()


class ReinforceAdaEstConfig(MethodConfig):
    n_mean: int = Field(8, ge=1, description="average samples per prompt: budget = n_mean * batch")
    n_min: int = Field(4, ge=1)
    n_max: int = Field(32, ge=1)
    lam: float = Field(0.9, gt=0.0, le=1.0, description="Ada-EMA decay lambda")
    prior_a: float = Field(0.5, gt=0.0)
    prior_b: float = Field(0.5, gt=0.0)
    eps: float = Field(1e-6, gt=0.0)
    positive_threshold: float = 0.5
    weight_mode: Literal["meta", "rewards", "none"] = "meta"

    @model_validator(mode="after")
    def _bounds(self):
        if not self.n_min <= self.n_mean <= self.n_max:
            raise ValueError(f"need n_min <= n_mean <= n_max, got {self.n_min}, {self.n_mean}, {self.n_max}")
        return self


class ReinforceAdaEst:
    name = "reinforce_ada_est"
    Config = ReinforceAdaEstConfig

    def __init__(self, config: ReinforceAdaEstConfig):
        self.config = config
        self.ema: dict[str, list[float]] = {}     # problem uid -> [N_tot, N_pos]

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        pass

    def p_hat(self, uid: str) -> float:
        c = self.config
        tot, pos = self.ema.get(uid, (0.0, 0.0))
        return (pos + c.prior_a) / (tot + c.prior_a + c.prior_b)

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        c = self.config
        p = [self.p_hat(q.uid) for q in batch]
        ns = allocate(p, c.n_mean * len(batch), c.n_min, c.n_max, c.eps)
        items = []
        for q in batch:
            ids = ctx.encode_prompt(q)
            items.append((q, ids, "", len(ids), q.uid))
        groups = ctx.sample_groups(items, ns)
        for g, ph, k in zip(groups, p, ns):
            r_bar = float(np.mean(g.rewards)) if g.rewards else 0.0
            weight = 1.0 / math.sqrt(max(r_bar, 0.0) + c.eps)
            g.meta.update(p_hat=ph, n_alloc=k, raw_rewards=list(g.rewards))
            if c.weight_mode == "meta":
                g.meta["adv_weight"] = weight
            elif c.weight_mode == "rewards":
                g.meta["reward_weight"] = weight
                g.rewards = [r * weight for r in g.rewards]
        return groups

    def observe(self, groups: list[Group]) -> None:
        c = self.config
        for g in groups:
            raw = g.meta.get("raw_rewards", g.rewards)
            tot, pos = self.ema.get(g.problem_uid, (0.0, 0.0))
            k = sum(1 for r in raw if r > c.positive_threshold)
            self.ema[g.problem_uid] = [c.lam * tot + len(raw), c.lam * pos + k]

    def rollouts_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.n_mean

    def buffer_stats(self) -> dict[str, float]:
        return {"tracked_prompts": float(len(self.ema))}

    def state_dict(self) -> dict[str, Any]:
        return {"ema": {u: list(v) for u, v in self.ema.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ema = {u: [float(v[0]), float(v[1])] for u, v in state["ema"].items()}
