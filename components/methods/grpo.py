"""GRPO rollouts: every prompt of the batch gets a group of ``n`` samples.

Source: Shao et al. 2024 (DeepSeekMath); verl ``compute_grpo_outcome_advantage`` for the
advantage (in ``components.algos``). The method itself only decides the allocation,
which for GRPO is uniform.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import Field

from components.data.schema import Problem
from components.methods.base import Group, MethodConfig, RolloutContext, Stateless


class GRPOConfig(MethodConfig):
    n: int = Field(8, ge=1, description="samples per prompt")


class GRPO(Stateless):
    name = "grpo"
    Config = GRPOConfig

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        return ctx.sample_groups(ctx.prompt_items(batch), self.config.n)

    def rollouts_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.n
