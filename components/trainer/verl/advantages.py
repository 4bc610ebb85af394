"""Per-token advantages on verl: RL-ZVP's as a verl advantage estimator (``register_adv_est``),
and OPD / PG-OPD's teacher-minus-student values (:func:`apply_teacher_advantages`).

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

from components.algos.advantages import zero_variance_groups, zvp_token_advantages

NAME = "rl_zvp"


@register_adv_est(NAME)
def compute_rl_zvp_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                             entropys: torch.Tensor, alpha: float = 0.1, epsilon: float = 1e-6,
                             norm_adv_by_std_in_grpo: bool = True, config=None, **_):
    """(advantages, returns), both [batch, response], as verl's estimators return them."""
    adv, _ = compute_grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=epsilon,
                                            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config)
    scores = token_level_rewards.sum(-1)
    zero = zero_variance_groups(scores, np.asarray(index))
    tok = zvp_token_advantages(entropys, response_mask.to(entropys.dtype), scores > 0, alpha)
    adv = torch.where(zero[:, None], tok.to(adv.dtype), adv) * response_mask
    return adv, adv


def apply_entropy_advantages(method, data, entropys: torch.Tensor, old_log_probs: torch.Tensor) -> dict[str, float]:
    """In the verl update, after the old log-probs: the zero-variance rows' advantages become the
    method's own per-token values from the old policy's entropy (``method.token_advantages``), in
    place on ``data.batch['advantages']``. Rows are found by uid (the batch is padded and balanced
    by then; a pad row copies a real row's uid and score, so it adds no distinct score, and its
    response mask is 0). Returns the count of zero-variance rows and of their non-zero tokens."""
    mask = data.batch["response_mask"].to(entropys.dtype)
    scores = data.batch["token_level_rewards"].sum(-1)
    zero = zero_variance_groups(scores, np.asarray(data.non_tensor_batch["uid"]))
    tok = method.token_advantages(entropys, mask, scores) * mask
    adv = data.batch["advantages"]
    data.batch["advantages"] = torch.where(zero[:, None], tok.to(adv.dtype), adv)
    real = mask.sum(-1) > 0
    return {"zvp/rows": float((zero & real).sum()),
            "zvp/nonzero_tokens": float(((tok != 0) & zero[:, None] & (mask > 0)).sum())}


def apply_teacher_advantages(method, data, entropys: torch.Tensor, old_log_probs: torch.Tensor) -> dict[str, float]:
    """OPD / PG-OPD in the verl update, after the old log-probs: every row's advantages become
    A_t = log pi_T(a_t) - log pi_S(a_t) (``method.token_advantages``; the teacher scored the
    rollout on the driver). The student's log-probs are the old policy's: with one PPO epoch
    that is the policy inside the update (ratio 1), where the embedded trainer reads them, and
    the clipped surrogate's gradient at ratio 1 is the REINFORCE term -A_t grad log pi_S.
    Rows are found by their index in the step's groups (``row``, carried through padding and
    balancing; a pad row's response mask is 0, so it gets none)."""
    mask = data.batch["response_mask"].to(old_log_probs.dtype)
    rows = torch.as_tensor(np.asarray(data.non_tensor_batch["row"], dtype=np.int64))
    scores = data.batch["token_level_rewards"].sum(-1)
    tok = method.token_advantages(entropys, mask, scores, rows=rows, logp=old_log_probs) * mask
    data.batch["advantages"] = tok.to(data.batch["advantages"].dtype)
    return {"opd/adv_mean": float(tok.sum() / mask.sum().clamp(min=1.0))}


# methods whose per-token advantages verl can compute: name -> the update hook above
TOKEN_ADVANTAGES = {NAME: apply_entropy_advantages, "opd": apply_teacher_advantages,
                    "pg_opd": apply_teacher_advantages}
