"""RL algorithm math (pure torch, CPU-friendly): advantages, losses and evaluation metrics.

Conventions follow verl 0.9.1 ``core_algos`` and docs/methods.md §1 and §12.
"""
from components.algos.advantages import broadcast, group_index, grpo_advantages, rloo_advantages
from components.algos.losses import AGG_MODES, agg_loss, clipped_pg_loss, kl_penalty, masked_mean, masked_sum
from components.algos.metrics import maj_at_k, majority_answer, mean_at_k, pass_at_k

__all__ = [
    "broadcast", "group_index", "grpo_advantages", "rloo_advantages",
    "AGG_MODES", "agg_loss", "clipped_pg_loss", "kl_penalty", "masked_mean", "masked_sum",
    "maj_at_k", "majority_answer", "mean_at_k", "pass_at_k",
]
