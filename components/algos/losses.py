"""Policy-gradient losses: loss aggregation, the clipped PPO/GRPO surrogate and KL penalties.

All conventions follow verl 0.9.1 ``verl/trainer/ppo/core_algos.py`` (docs/methods.md §1
and §8), single data-parallel rank (``dp_size=1``, no global batch info); ``tests/algos/test_advantages_losses.py``
checks each function against verl itself on random inputs.

* :func:`agg_loss` = verl ``agg_loss``. Modes:
  ``token-mean`` (DAPO): sum over all valid tokens / number of valid tokens;
  ``seq-mean-token-mean`` (GRPO paper): mean over sequences of each sequence's token mean;
  ``seq-mean-token-sum``: mean over sequences of each sequence's token sum;
  ``seq-mean-token-sum-norm`` (Dr. GRPO): as ``seq-mean-token-sum`` then divided by a constant,
  by default ``mask.shape[-1]`` (verl's ``loss_scale_factor=None`` convention: the padded max
  response length, which should be kept constant through training);
  ``token-sum``: plain masked sum.
  Sequences with no valid token are excluded from the sequence means (as in verl).
  Deviation from verl, degenerate case only: an all-zero mask gives 0 instead of NaN (0/0).
* :func:`clipped_pg_loss` = verl ``compute_policy_loss_vanilla`` (:func:`pg_token_losses` is
  its per-token part, for a trainer that aggregates micro-batches itself): ratio = exp(clamp(logp -
  old_logp, -20, 20)); per-token loss max(-A*ratio, -A*clip(ratio, 1-clip_low, 1+clip_high))
  (clip-higher when clip_high > clip_low, DAPO uses 0.2/0.28), plus verl's dual clip
  min(., -A*clip_ratio_c) for tokens with A < 0 (clip_ratio_c=3.0, verl's default; None
  disables it).
* :func:`kl_penalty` = verl ``kl_penalty`` / ``kl_penalty_forward``: "kl"/"k1" = logp - ref;
  "abs"; "mse"/"k2" = 0.5 (logp - ref)^2; "low_var_kl"/"k3" = exp(ref - logp) - (ref - logp) - 1
  with the log-ratio clamped to [-20, 20] and the result clamped to [-10, 10]; a trailing "+"
  (e.g. "k3+") uses the k2 gradient with the forward value of the base estimator
  (straight-through).
"""
from __future__ import annotations

import torch

__all__ = ["AGG_MODES", "CLIP_RATIO_C", "masked_sum", "masked_mean", "agg_loss", "pg_token_losses",
           "clipped_pg_loss", "kl_penalty"]

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm",
             "token-sum")


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Sum of ``values * mask``; NaN/inf outside the mask cannot leak in (verl ``masked_sum``)."""
    m = mask.to(values.dtype)
    v = torch.where(mask.bool(), values, torch.zeros_like(values)) * m
    return v.sum() if dim is None else v.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Masked mean, denominator ``mask.sum() + 1e-8`` (verl ``masked_mean``; used for stats)."""
    denom = mask.to(values.dtype).sum() if dim is None else mask.to(values.dtype).sum(dim=dim)
    return masked_sum(values, mask, dim) / (denom + 1e-8)


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean",
             loss_scale_factor: float | None = None) -> torch.Tensor:
    """Aggregate a per-token loss matrix [N, T] into a scalar (verl ``agg_loss``, dp_size=1).

    ``loss_scale_factor`` only affects ``seq-mean-token-sum-norm``; None means ``mask.shape[-1]``.
    """
    if loss_mat.shape != mask.shape or loss_mat.dim() != 2:
        raise ValueError(f"need loss_mat and mask of the same [N, T] shape, got "
                         f"{tuple(loss_mat.shape)} and {tuple(mask.shape)}")
    m = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        return masked_sum(loss_mat, mask) / m.sum().clamp_min(1.0)
    if mode == "token-sum":
        return masked_sum(loss_mat, mask)
    tok_count = m.sum(dim=-1)
    seq_valid = (tok_count > 0).to(loss_mat.dtype)
    n_seq = seq_valid.sum().clamp_min(1.0)
    seq_sum = masked_sum(loss_mat, mask, dim=-1)
    if mode == "seq-mean-token-mean":
        return (seq_sum / (tok_count + 1e-8) * seq_valid).sum() / n_seq
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        loss = (seq_sum * seq_valid).sum() / n_seq
        if mode == "seq-mean-token-sum-norm":
            loss = loss / (mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
        return loss
    raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of {AGG_MODES}")


# verl's default dual-clip bound (``actor.clip_ratio_c``)
CLIP_RATIO_C = 3.0


def pg_token_losses(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float | None = CLIP_RATIO_C,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate, before aggregation (verl ``compute_policy_loss_vanilla``).

    ``advantages`` broadcasts against ``logp`` ([N, T] per token or [N, 1] per response).
    Returns ``(loss [N, T], clipped [N, T] bool: the clipped term is active, dual_clipped
    [N, T] bool: the dual clip is active, neg_kl [N, T] = clamped logp - old_logp)``. A trainer
    that splits a batch into micro-batches aggregates the loss with its own weights.
    """
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1, got {clip_ratio_c}")
    neg_kl = torch.clamp(logp - old_logp, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(loss1, loss2)
    is_clipped = torch.gt(loss2, loss1)
    if clip_ratio_c is None:
        return clipped, is_clipped, torch.zeros_like(is_clipped), neg_kl
    loss3 = -advantages * clip_ratio_c
    negative = advantages < 0
    per_token = torch.where(negative, torch.minimum(loss3, clipped), clipped)
    return per_token, is_clipped, torch.gt(clipped, loss3) & negative, neg_kl


def clipped_pg_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg: str = "token-mean",
    clip_ratio_c: float | None = CLIP_RATIO_C,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO/GRPO clipped surrogate loss (to minimise), verl ``compute_policy_loss_vanilla``.

    Args:
        logp, old_logp: per-token log-probs [N, T] under the current / behaviour policy.
        advantages: [N, T] per-token advantages (use :func:`broadcast` for per-response ones)
            or [N] (broadcast here).
        mask: [N, T] response mask.
        clip_low, clip_high: ratio clipped to [1 - clip_low, 1 + clip_high] (clip-higher).
        agg: aggregation mode, see :func:`agg_loss`.
        clip_ratio_c: dual-clip lower bound for A < 0 (verl default 3.0; None disables).

    Returns:
        ``(loss, stats)`` with float stats ``clipfrac`` (fraction of valid tokens where the clipped
        term is active), ``clipfrac_lower`` (dual-clip active), ``approx_kl`` (masked mean of
        old_logp - logp, verl's ``ppo_kl``).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(logp)
    per_token, is_clipped, dual, neg_kl = pg_token_losses(logp, old_logp, advantages, clip_low, clip_high,
                                                          clip_ratio_c)
    loss = agg_loss(per_token, mask, agg, loss_scale_factor=loss_scale_factor)
    stats = {
        "clipfrac": float(masked_mean(is_clipped.to(logp.dtype), mask).detach()),
        "clipfrac_lower": float(masked_mean(dual.to(logp.dtype), mask).detach()),
        "approx_kl": float(masked_mean(-neg_kl, mask).detach()),
    }
    return loss, stats


def _kl_forward(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    if kind in ("kl", "k1"):
        return logp - ref_logp
    if kind == "abs":
        return (logp - ref_logp).abs()
    if kind in ("mse", "k2"):
        return 0.5 * (logp - ref_logp).square()
    if kind in ("low_var_kl", "k3"):
        kl = torch.clamp(ref_logp - logp, min=-20, max=20)
        return torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)
    raise ValueError(f"unknown kl penalty {kind!r}; expected kl|k1|abs|mse|k2|low_var_kl|k3 "
                     "(optionally with a trailing '+')")


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference (verl ``kl_penalty``).

    See J. Schulman, "Approximating KL divergence" (2020). "low_var_kl"/"k3" is clamped to
    [-10, 10] as in verl. A trailing "+" (e.g. "low_var_kl+") returns the forward value of the
    base estimator with the gradient of k2 (straight-through), as verl does.
    """
    base = kind[:-1] if kind.endswith("+") else kind
    forward = _kl_forward(logp, ref_logp, base)
    if not kind.endswith("+") or base in ("mse", "k2"):
        return forward
    backward = 0.5 * (logp - ref_logp).square()
    return backward - backward.detach() + forward.detach()
