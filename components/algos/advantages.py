"""Advantage estimators, in one registry (``ADV_ESTIMATORS``, as verl's ``register_adv_est``):
GRPO, Dr. GRPO and RLOO on outcome rewards (one scalar reward per response), GiGPO and its
episode-level part on episodes (``components.algos.gigpo``).

Conventions follow verl 0.9.1 ``verl/trainer/ppo/core_algos.py`` exactly (docs/methods.md §1),
and ``tests/algos/test_advantages_losses.py`` checks them against verl itself on random inputs:

* GRPO (``compute_grpo_outcome_advantage``): A_i = (r_i - mean_g) / (std_g + eps) with
  ``torch.std`` = the UNBIASED estimate (ddof = 1), eps = 1e-6. A singleton group uses
  mean 0 and std 1, so its advantage is r / (1 + eps) (and r with ``norm_by_std=False``).
* Dr. GRPO (verl flag ``norm_adv_by_std_in_grpo=False``): A_i = r_i - mean_g.
* RLOO (``compute_rloo_outcome_advantage``): A_i = r_i - mean_{j != i} r_j
  = n/(n-1) * (r_i - mean_g); a singleton group gets A = r.

Unlike verl (a Python loop over the batch), the computation here is vectorised with scatter ops.
Group statistics are computed in float64 and the result is cast back to the reward dtype
(float32 for integer/bool rewards), so results agree with verl to float32 rounding.

Group ids may be any hashable values (strings, ints, tuples, a numpy object array, or a
tensor); groups are numbered in first-occurrence order and need not be contiguous.
"""
from __future__ import annotations

from typing import Callable, Hashable, Sequence

import torch

from components.algos.gigpo import gigpo_advantages

__all__ = ["group_index", "grpo_advantages", "rloo_advantages", "broadcast", "ADV_ESTIMATORS", "adv_estimator"]


def group_index(group_ids: Sequence[Hashable] | torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary hashable group ids to dense ints (first-occurrence order).

    Returns ``(inverse [N] long tensor, number_of_groups)``.
    """
    if isinstance(group_ids, torch.Tensor):
        group_ids = group_ids.tolist()
    elif hasattr(group_ids, "tolist") and not isinstance(group_ids, (list, tuple)):
        group_ids = group_ids.tolist()  # numpy arrays -> Python scalars/objects
    mapping: dict[Hashable, int] = {}
    inv = [mapping.setdefault(g, len(mapping)) for g in group_ids]
    return torch.tensor(inv, dtype=torch.long), len(mapping)


def _prepare(rewards, group_ids) -> tuple[torch.Tensor, torch.dtype, torch.Tensor, int]:
    r = torch.as_tensor(rewards)
    if r.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(r.shape)}")
    out_dtype = r.dtype if r.is_floating_point() else torch.get_default_dtype()
    inv, n_groups = group_index(group_ids)
    if inv.numel() != r.numel():
        raise ValueError(f"len(group_ids)={inv.numel()} != len(rewards)={r.numel()}")
    return r.detach().to(torch.float64), out_dtype, inv.to(r.device), n_groups


def _group_stats(r64: torch.Tensor, inv: torch.Tensor, n_groups: int):
    """Per-item (count, mean, unbiased std) of the item's group, in float64."""
    counts = torch.zeros(n_groups, dtype=torch.float64, device=r64.device).index_add_(
        0, inv, torch.ones_like(r64))
    sums = torch.zeros(n_groups, dtype=torch.float64, device=r64.device).index_add_(0, inv, r64)
    mean_g = sums / counts
    sq = torch.zeros(n_groups, dtype=torch.float64, device=r64.device).index_add_(
        0, inv, (r64 - mean_g[inv]) ** 2)
    std_g = torch.sqrt(sq / (counts - 1).clamp_min(1.0))  # ddof = 1, like torch.std
    return counts[inv], mean_g[inv], std_g[inv]


def grpo_advantages(
    rewards: torch.Tensor | Sequence[float],
    group_ids: Sequence[Hashable] | torch.Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """GRPO / Dr. GRPO advantages, one per response ([N] -> [N]).

    verl ``compute_grpo_outcome_advantage`` convention: per-group z-score
    ``(r - mean) / (std + eps)`` with unbiased std (ddof=1); singleton groups use mean 0, std 1.
    ``norm_by_std=False`` is Dr. GRPO (``norm_adv_by_std_in_grpo=False``): ``r - mean``.
    """
    r64, out_dtype, inv, n_groups = _prepare(rewards, group_ids)
    if r64.numel() == 0:
        return torch.zeros(0, dtype=out_dtype)
    count, mean, std = _group_stats(r64, inv, n_groups)
    single = count == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    adv = (r64 - mean) / (std + eps) if norm_by_std else r64 - mean
    return adv.to(out_dtype)


def rloo_advantages(
    rewards: torch.Tensor | Sequence[float],
    group_ids: Sequence[Hashable] | torch.Tensor,
) -> torch.Tensor:
    """RLOO (leave-one-out baseline) advantages ([N] -> [N]).

    verl ``compute_rloo_outcome_advantage``: A_i = n/(n-1) * (r_i - mean_g) for groups of n > 1,
    which equals r_i minus the mean of the other n-1 rewards; singleton groups get A = r.
    """
    r64, out_dtype, inv, n_groups = _prepare(rewards, group_ids)
    if r64.numel() == 0:
        return torch.zeros(0, dtype=out_dtype)
    count, mean, _ = _group_stats(r64, inv, n_groups)
    adv = torch.where(count > 1, count / (count - 1).clamp_min(1.0) * (r64 - mean), r64)
    return adv.to(out_dtype)


def broadcast(adv: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Broadcast per-response advantages [N] to tokens [N, T], zero outside the mask.

    Same as verl's ``scores.unsqueeze(-1) * response_mask``.
    """
    adv = torch.as_tensor(adv)
    if adv.dim() != 1 or response_mask.dim() != 2 or response_mask.shape[0] != adv.shape[0]:
        raise ValueError(f"need adv [N] and mask [N, T], got {tuple(adv.shape)} and "
                         f"{tuple(response_mask.shape)}")
    return adv.unsqueeze(-1) * response_mask.to(adv.dtype)


def zero_variance_groups(rewards: torch.Tensor, group_ids: Sequence[Hashable]) -> torch.Tensor:
    """[N] bool: the sequence's group has identical rewards (std 0; a singleton counts)."""
    inv, n_groups = group_index(group_ids)
    r = rewards.detach().double()
    inv = inv.to(r.device)
    hi = torch.full((n_groups,), -float("inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, inv, r, "amax")
    lo = torch.full((n_groups,), float("inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, inv, r, "amin")
    return (hi == lo)[inv]


def zvp_token_advantages(entropy: torch.Tensor, mask: torch.Tensor, positive: torch.Tensor,
                         alpha: float = 0.1) -> torch.Tensor:
    """RL-ZVP (Le et al., ICLR 2026) token advantages for zero-variance groups.

    Positive group (all correct): A_t = alpha * H_t. Negative group: A_t = -alpha * (max_k H_k - H_t),
    the max taken per response over its own tokens. H is the detached full-vocabulary entropy.
    """
    h = entropy.detach() * mask
    hmax = torch.where(mask > 0, h, torch.full_like(h, -float("inf"))).amax(-1, keepdim=True)
    hmax = torch.where(torch.isfinite(hmax), hmax, torch.zeros_like(hmax))
    pos = alpha * h
    neg = -alpha * (hmax - h) * mask
    return torch.where(positive[:, None], pos, neg)


def _gigpo(episodes, cfg, step_weight: float) -> list[list[float]]:
    return gigpo_advantages(episodes, gamma=cfg.gamma, step_weight=step_weight, mode=cfg.gigpo_mode,
                            episode_stats=cfg.episode_stats).advantages


# ---------------------------------------------------------------------- the estimator registry
# name -> estimator, as verl's ``register_adv_est``: a trainer looks up ``cfg.adv_estimator``
# here. An outcome estimator takes the batch's sequences (``rewards``, ``group_ids``) and gives
# one advantage per sequence; an episode estimator takes GiGPO ``Episode``s and gives one per
# generated turn.
ADV_ESTIMATORS: dict[str, Callable] = {
    "grpo": lambda seqs, cfg: grpo_advantages(seqs.rewards, seqs.group_ids, norm_by_std=True),
    "drgrpo": lambda seqs, cfg: grpo_advantages(seqs.rewards, seqs.group_ids, norm_by_std=False),
    "rloo": lambda seqs, cfg: rloo_advantages(seqs.rewards, seqs.group_ids),
    # A = A^E + step_weight * A^S (GiGPO)
    "gigpo": lambda episodes, cfg: _gigpo(episodes, cfg, cfg.step_weight),
    # A^E only: GRPO on episode returns, every turn of an episode the same advantage
    "episode": lambda episodes, cfg: _gigpo(episodes, cfg, 0.0),
}


def adv_estimator(name: str) -> Callable:
    if name not in ADV_ESTIMATORS:
        raise KeyError(f"unknown advantage estimator {name!r} (known: {', '.join(sorted(ADV_ESTIMATORS))})")
    return ADV_ESTIMATORS[name]
