"""RL-ZVP's verl advantage estimator gives the embedded trainer's per-token advantages."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="verl (the GPU backend) is not installed in this environment")


def _embedded(rewards, group_ids, entropy, mask, alpha):
    """What components/trainer/embedded.py computes for the same rows in its first epoch."""
    from components.methods.base import Group
    from components.methods.registry import build
    from components.algos.advantages import adv_estimator

    method = build("rl_zvp", {"n": 4, "alpha": alpha})
    sizes = {g: int((group_ids == g).sum()) for g in np.unique(group_ids.numpy())}
    groups = [Group(uid=str(g), problem_uid=str(g), answer="1", context_ids=(1,), prompt_len=1,
                    responses=[(2,)] * k, texts=[""] * k, rewards=rewards[group_ids == g].tolist())
              for g, k in sizes.items()]
    seqs = type("Seqs", (), {"rewards": rewards, "group_ids": group_ids})()
    adv = adv_estimator("grpo")(seqs, None)   # what the embedded trainer looks up for adv_estimator: grpo
    per_token = torch.tensor([t for g, t in zip(groups, method.token_advantage_groups(groups)) for _ in range(g.n)])
    tok = method.token_advantages(entropy, mask, rewards)
    return torch.where(per_token[:, None], tok, adv[:, None].expand_as(tok)) * mask


def test_rl_zvp_estimator_matches_the_embedded_trainer():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    import components.trainer.verl.advantages  # noqa: F401  registers "rl_zvp"

    g = torch.Generator().manual_seed(0)
    # four groups of 4: all correct, all wrong, mixed, mixed
    rewards = torch.tensor([1., 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1])
    group_ids = torch.arange(4).repeat_interleave(4)
    T = 7
    lengths = torch.randint(2, T + 1, (16,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    entropy = torch.rand(16, T, generator=g) * 3 * mask
    token_rewards = torch.zeros(16, T)
    token_rewards[torch.arange(16), lengths - 1] = rewards       # verl: the score on the last token

    fn = get_adv_estimator_fn("rl_zvp")
    adv, ret = fn(token_level_rewards=token_rewards, response_mask=mask, index=group_ids.numpy().astype(str),
                  entropys=entropy, alpha=0.1)
    want = _embedded(rewards, group_ids, entropy, mask, 0.1)
    assert torch.allclose(adv, want, atol=1e-5), (adv - want).abs().max()
    assert (adv[:8] != 0).any() and (adv[:4] >= 0).all() and (adv[4:8] <= 0).all()   # the zero-variance rows
    assert torch.equal(adv, ret)


def test_validation_knows_which_token_methods_verl_runs():
    from components.trainer.verl.advantages import TOKEN_ADVANTAGES
    from components.trainer.verl.cells import VERL_TOKEN_METHODS

    assert tuple(TOKEN_ADVANTAGES) == VERL_TOKEN_METHODS
