"""RL-ZVP's token-level advantages as a verl advantage estimator (``register_adv_est``).

verl's actor loss takes advantages as a [batch, response] tensor computed on the driver; RL-ZVP's
zero-variance rows need the policy's per-token entropy H_t. With one PPO epoch the policy inside
the update is the rollout policy, so the entropy verl computes with the old log-probs
(``compute_log_prob`` with ``calculate_entropy``) is the H_t the embedded trainer computes inside
its loss, and the estimator below gives the same per-token values (tests/trainer/test_verl_advantages.py).
With more epochs the embedded trainer re-reads H_t under the moving policy and this does not.

Rows of a group with more than one distinct score get GRPO's outcome advantage (verl's own);
rows of a zero-variance group get ``zvp_token_advantages`` (components/algos/advantages.py).
"""
from __future__ import annotations

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

from components.algos.advantages import zvp_token_advantages

NAME = "rl_zvp"


def zero_variance_rows(scores: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """True for each row whose uid group has one distinct score (a single sample counts)."""
    out = torch.zeros(len(scores), dtype=torch.bool)
    for uid in np.unique(index):
        rows = torch.as_tensor(np.nonzero(index == uid)[0])
        out[rows] = bool(torch.unique(scores[rows]).numel() == 1)
    return out


@register_adv_est(NAME)
def compute_rl_zvp_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                             entropys: torch.Tensor, alpha: float = 0.1, epsilon: float = 1e-6,
                             norm_adv_by_std_in_grpo: bool = True, config=None, **_):
    """(advantages, returns), both [batch, response], as verl's estimators return them."""
    adv, _ = compute_grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=epsilon,
                                            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config)
    scores = token_level_rewards.sum(-1)
    zero = zero_variance_rows(scores, np.asarray(index))
    tok = zvp_token_advantages(entropys, response_mask.to(entropys.dtype), scores > 0, alpha)
    adv = torch.where(zero[:, None], tok.to(adv.dtype), adv) * response_mask
    return adv, adv
