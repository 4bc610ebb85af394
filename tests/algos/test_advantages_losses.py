"""Advantages and losses: docs/methods.md TV1 plus parity with verl 0.9.1 ``core_algos`` itself.

All verl functions used here run on CPU. verl's import is slow (~10 s), so it is imported once
per module.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from components.algos import (
    agg_loss, broadcast, clipped_pg_loss, grpo_advantages, kl_penalty, rloo_advantages,
)

from verl.trainer.ppo import core_algos  # noqa: E402  (installed by requirements.lock)

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


# ---------------------------------------------------------------- TV1 (docs/methods.md §1)
def test_tv1_grpo_ddof1():
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), ["q"] * 4)
    assert torch.allclose(adv, torch.tensor([0.499999, -1.499997, 0.499999, 0.499999]), atol=1e-6)


def test_tv1_dr_grpo():
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), ["q"] * 4, norm_by_std=False)
    assert torch.allclose(adv, torch.tensor([0.25, -0.75, 0.25, 0.25]), atol=1e-7)


def test_tv1_rloo():
    adv = rloo_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), ["q"] * 4)
    assert torch.allclose(adv, torch.tensor([1 / 3, -1.0, 1 / 3, 1 / 3]), atol=1e-6)


def test_tv1_ddof0_is_not_what_we_use():
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), ["q"] * 4)
    assert not torch.allclose(adv, torch.tensor([0.577349, -1.732047, 0.577349, 0.577349]), atol=1e-3)


def test_singletons_and_interleaved_groups():
    r = torch.tensor([3.0, 1.0, 0.0, 5.0, 1.0])
    g = ["a", "b", "a", "c", "b"]  # c is a singleton; groups interleaved
    adv = grpo_advantages(r, g)
    assert adv[3] == pytest.approx(5.0 / (1 + 1e-6))
    assert adv[1] == adv[4] == 0.0  # zero-variance group -> 0
    assert adv[0] == pytest.approx(1.5 / (np.std([3, 0], ddof=1) + 1e-6))
    assert grpo_advantages(r, g, norm_by_std=False)[3] == 5.0
    assert rloo_advantages(r, g)[3] == 5.0
    assert rloo_advantages(r, g)[0] == pytest.approx(3.0)  # 3 - mean(others = [0])


def test_integer_rewards_and_numpy_ids():
    adv = grpo_advantages([1, 0, 1, 1], np.array(["q"] * 4, dtype=object))
    assert adv.dtype == torch.float32
    assert torch.allclose(adv, torch.tensor([0.499999, -1.499997, 0.499999, 0.499999]), atol=1e-6)


def test_broadcast():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    out = broadcast(torch.tensor([2.0, -1.0]), mask)
    assert torch.equal(out, torch.tensor([[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]))


# ---------------------------------------------------------------- parity with verl
def _random_batch(seed: int, n_groups: int = 7, max_n: int = 6, T: int = 13):
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, max_n + 1, (n_groups,), generator=gen).tolist()
    uids = [f"p{g}" for g, s in enumerate(sizes) for _ in range(s)]
    perm = torch.randperm(len(uids), generator=gen).tolist()
    uids = [uids[i] for i in perm]  # groups are not contiguous
    N = len(uids)
    if seed % 2:
        rewards = torch.randint(0, 2, (N,), generator=gen).float()  # binary, many ties
    else:
        rewards = torch.randn(N, generator=gen)
    lengths = torch.randint(1, T + 1, (N,), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    return rewards, uids, mask


def _token_rewards(rewards, mask):
    # verl sums token-level rewards; put the outcome reward on the last valid token.
    tl = torch.zeros_like(mask)
    last = mask.sum(-1).long() - 1
    tl[torch.arange(len(rewards)), last] = rewards
    return tl


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches_verl(seed, norm_by_std):
    rewards, uids, mask = _random_batch(seed)
    ref, _ = core_algos.compute_grpo_outcome_advantage(
        _token_rewards(rewards, mask), mask, index=np.array(uids, dtype=object),
        epsilon=1e-6, norm_adv_by_std_in_grpo=norm_by_std)
    ours = broadcast(grpo_advantages(rewards, uids, eps=1e-6, norm_by_std=norm_by_std), mask)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_rloo_matches_verl(seed):
    rewards, uids, mask = _random_batch(seed)
    ref, _ = core_algos.compute_rloo_outcome_advantage(
        _token_rewards(rewards, mask), mask, index=np.array(uids, dtype=object))
    ours = broadcast(rloo_advantages(rewards, uids), mask)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-5)


def _loss_inputs(seed: int, N: int = 9, T: int = 11):
    gen = torch.Generator().manual_seed(100 + seed)
    old = -torch.rand(N, T, generator=gen) * 3
    logp = old + 0.4 * torch.randn(N, T, generator=gen)  # ratios well outside [0.8, 1.28]
    adv = torch.randn(N, generator=gen) * 2
    lengths = torch.randint(0, T + 1, (N,), generator=gen)
    lengths[0] = T
    lengths[1] = 0  # a fully masked sequence (excluded from seq means, as in verl)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    return logp, old, adv, mask


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(3))
def test_agg_loss_matches_verl(mode, seed):
    logp, _, _, mask = _loss_inputs(seed)
    loss_mat = torch.randn(logp.shape, generator=torch.Generator().manual_seed(seed))
    ref = core_algos.agg_loss(loss_mat=loss_mat, loss_mask=mask, loss_agg_mode=mode)
    assert torch.allclose(agg_loss(loss_mat, mask, mode), ref, atol=1e-6, rtol=1e-5)


def test_agg_loss_seq_mean_token_sum_norm_constant():
    loss_mat, mask = torch.ones(2, 8), torch.tensor([[1.0] * 8, [1.0] * 2 + [0.0] * 6])
    assert agg_loss(loss_mat, mask, "seq-mean-token-sum-norm").item() == pytest.approx(5 / 8)
    assert agg_loss(loss_mat, mask, "seq-mean-token-sum-norm", loss_scale_factor=4).item() == \
        pytest.approx(5 / 4)
    assert agg_loss(loss_mat, torch.zeros(2, 8), "token-mean").item() == 0.0  # verl: NaN
    with pytest.raises(ValueError):
        agg_loss(loss_mat, mask, "nope")


def _actor_config(clip_low, clip_high):
    from verl.workers.config import FSDPActorConfig

    return FSDPActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=1,
                           clip_ratio=clip_low, clip_ratio_low=clip_low, clip_ratio_high=clip_high,
                           clip_ratio_c=3.0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("clip", [(0.2, 0.2), (0.2, 0.28)])
def test_clipped_pg_loss_matches_verl_vanilla(mode, clip):
    logp, old, adv, mask = _loss_inputs(7)
    adv_tok = broadcast(adv, mask)
    ref_loss, ref_metrics = core_algos.compute_policy_loss_vanilla(
        old_log_prob=old, log_prob=logp, advantages=adv_tok, response_mask=mask,
        loss_agg_mode=mode, config=_actor_config(*clip))
    loss, stats = clipped_pg_loss(logp, old, adv_tok, mask, clip_low=clip[0], clip_high=clip[1],
                                  agg=mode)
    assert torch.allclose(loss, ref_loss, atol=1e-6, rtol=1e-5)
    assert stats["clipfrac"] == pytest.approx(ref_metrics["actor/pg_clipfrac"], abs=1e-6)
    assert stats["approx_kl"] == pytest.approx(ref_metrics["actor/ppo_kl"], abs=1e-6)
    assert stats["clipfrac_lower"] == pytest.approx(ref_metrics["actor/pg_clipfrac_lower"], abs=1e-6)
    assert 0 < stats["clipfrac"] < 1


def test_clipped_pg_loss_gradient_matches_verl():
    logp, old, adv, mask = _loss_inputs(3)
    a = logp.clone().requires_grad_(True)
    b = logp.clone().requires_grad_(True)
    clipped_pg_loss(a, old, adv, mask, 0.2, 0.28)[0].backward()
    core_algos.compute_policy_loss_vanilla(old_log_prob=old, log_prob=b,
                                           advantages=broadcast(adv, mask), response_mask=mask,
                                           config=_actor_config(0.2, 0.28))[0].backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_clipped_pg_loss_on_policy_is_minus_mean_advantage():
    logp, _, adv, mask = _loss_inputs(1)
    loss, stats = clipped_pg_loss(logp, logp, adv, mask)  # [N] advantages broadcast inside
    expected = -(broadcast(adv, mask)).sum() / mask.sum()
    assert torch.allclose(loss, expected, atol=1e-6)
    assert stats["clipfrac"] == 0.0 and abs(stats["approx_kl"]) < 1e-9


@pytest.mark.parametrize("kind", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k3+",
                                  "low_var_kl+"])
def test_kl_penalty_matches_verl(kind):
    gen = torch.Generator().manual_seed(5)
    logp = -torch.rand(6, 10, generator=gen) * 4
    ref = logp + torch.randn(6, 10, generator=gen) * 3  # large gaps exercise the clamps
    ref[0, 0] = logp[0, 0] + 30.0
    a, b = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    ours, theirs = kl_penalty(a, ref, kind), core_algos.kl_penalty(b, ref, kind)
    assert torch.allclose(ours, theirs, atol=1e-6)
    ours.sum().backward()
    theirs.sum().backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_low_var_kl_is_clamped():
    logp = torch.tensor([0.0, 0.0])
    out = kl_penalty(logp, torch.tensor([30.0, -0.5]), "low_var_kl")
    assert out[0].item() == 10.0
    assert out[1].item() == pytest.approx(np.exp(-0.5) + 0.5 - 1, abs=1e-6)
    with pytest.raises(ValueError):
        kl_penalty(logp, logp, "full")
