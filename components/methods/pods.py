"""PODS: Policy Optimization with Down-Sampling (docs/methods.md §9).

Source: Xu et al. 2025, "Not All Rollouts are Useful: Down-Sampling Rollouts in LLM
Reinforcement Learning" (arXiv 2504.13818, v1/v2 abstracts): generate ``n`` rollouts per
prompt, train on the ``m < n`` whose rewards have the largest variance ("max-variance
down-sampling ... admits an O(n log n) solution"). The subset structure (the k lowest plus
the m - k highest rewards of the sorted list, for some k in 0..m) is the paper's theorem
as recalled [INF]; ``max_variance_subset`` evaluates all m + 1 splits.

Open choices, as config knobs [NF/INF]:
- ``n`` = 16, ``m`` = 8 (the paper's defaults were not retrieved);
- variance is the population variance (ddof = 0; the argmax does not depend on ddof as
  ``m`` is fixed); ties between splits go to the smallest k; ties between equal rewards
  go by index (a stable sort: the lowest-index low rewards, the highest-index high ones);
- the kept samples form one group with the prompt's uid, so the trainer's estimator
  (GRPO by default) is computed on the kept subset only, as in the paper.

The ``n - m`` dropped samples per prompt are moved to meter purpose ``"discarded"``;
``rollouts_per_step(B) = B * n`` (all generated).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import Field, model_validator

from components.data.schema import Problem
from components.methods.base import Group, MethodConfig, RolloutContext, Stateless
from components.methods.dapo import discard


def max_variance_subset(rewards: Sequence[float], m: int) -> list[int]:
    """Indices (sorted) of the size-``m`` subset of ``rewards`` with the largest variance."""
    r = np.asarray(rewards, dtype=float)
    if m >= len(r):
        return list(range(len(r)))
    if m <= 0:
        return []
    order = np.argsort(r, kind="stable")
    best, best_var = None, -1.0
    for k in range(m + 1):
        idx = np.concatenate([order[:k], order[len(r) - (m - k):]]) if m - k > 0 else order[:k]
        v = float(np.var(r[idx]))
        if v > best_var + 1e-12:
            best, best_var = idx, v
    return sorted(int(i) for i in best)


class PODSConfig(MethodConfig):
    n: int = Field(16, ge=1, description="rollouts generated per prompt")
    m: int = Field(8, ge=1, description="rollouts kept per prompt (max-variance subset)")

    @model_validator(mode="after")
    def _m_le_n(self):
        if self.m > self.n:
            raise ValueError(f"m ({self.m}) must be <= n ({self.n})")
        return self


class PODS(Stateless):
    name = "pods"
    Config = PODSConfig

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        items = ctx.prompt_items(batch)
        groups = ctx.sample_groups(items, self.config.n)
        keep = [max_variance_subset(g.rewards, self.config.m) for g in groups]
        discard(ctx, groups, keep)
        return [g.subset(idx, {**g.meta, "generated": g.n, "kept_idx": idx,
                               "generated_mean_reward": float(np.mean(g.rewards))})
                for g, idx in zip(groups, keep)]

    def rollouts_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.n
