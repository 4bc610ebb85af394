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


@pytest.mark.parametrize("method_name", ["opd", "pg_opd"])
def test_teacher_advantages_on_verl_rows_match_the_embedded_trainer(method_name, tok):
    """OPD / PG-OPD: the verl hook's per-token advantages, on the step's rows after verl's
    divisor padding and a balancing reorder, equal what the embedded trainer computes for the
    same rows (teacher log-probs from the method's own teacher pass; the student's log-probs the
    same policy's on both sides, as verl's old log-probs are with one PPO epoch)."""
    from verl.protocol import pad_dataproto_to_divisor

    from components.methods.base import Group
    from components.methods.registry import build
    from components.trainer.sequences import build_sequences, response_logprobs
    from components.trainer.verl.advantages import TOKEN_ADVANTAGES
    from components.trainer.verl.dataproto import groups_to_dataproto
    from support.tiny import tiny_test_policy

    student, teacher = tiny_test_policy(tok, seed=0), tiny_test_policy(tok, seed=1)
    method = build(method_name, {"n": 2, "overlap": "sampled"})
    method.setup([], {"teacher": teacher, "tokenizer": tok})
    enc = lambda s: tuple(tok.encode(s, add_special_tokens=False))
    groups = [Group(uid=f"g{i}", problem_uid=f"p{i}", answer="1", context_ids=enc(f"Q{i}: 1+{i}="), prompt_len=6,
                    responses=[enc(f"{i + 1} ok"), enc(f"{i}")], texts=["", ""], rewards=[1.0, 0.0])
              for i in range(3)]
    method._score_teacher(groups)                      # what its rollout does after sampling

    # embedded: components/trainer/embedded.py's per-token rows (first epoch: logp is the policy's)
    seqs = build_sequences(groups, tok.pad_token_id)
    per_token = [t for g, t in zip(groups, method.token_advantage_groups(groups)) for _ in range(g.n)]
    with torch.no_grad():
        logp, ent = response_logprobs(student, seqs.input_ids, seqs.attention, with_entropy=True)
    rows = torch.arange(len(seqs))
    want = method.token_advantages(ent, seqs.response_mask, seqs.rewards, rows=rows, logp=logp)
    assert all(per_token) and (want != 0).any()

    # verl: the step's DataProto, its old log-probs in verl's [N, R] layout, padded and reordered
    data = groups_to_dataproto(groups, tok.pad_token_id, response_length=6)
    R = data.batch["responses"].shape[1]
    old = torch.zeros(len(data), R)
    for i in range(len(data)):
        pos = torch.nonzero(seqs.response_mask[i] > 0).flatten()
        old[i, :len(pos)] = logp[i, pos]
    data.batch["advantages"] = torch.zeros(len(data), R)
    data.batch["old"] = old
    data.non_tensor_batch["row"] = np.arange(len(data))
    method.token_advantage_groups(groups)
    data, pad = pad_dataproto_to_divisor(data, 4)
    data.batch["response_mask"][-pad:] = 0
    data.reorder(torch.tensor([7, 2, 5, 0, 6, 1, 4, 3]))
    stats = TOKEN_ADVANTAGES[method_name](method, data, torch.zeros(len(data), R), data.batch["old"])
    got = data.batch["advantages"]
    for j, r in enumerate(data.non_tensor_batch["row"].tolist()):
        m = data.batch["response_mask"][j] > 0
        if not m.any():                                  # a pad row carries no loss
            assert (got[j] == 0).all()
            continue
        pos = torch.nonzero(seqs.response_mask[r] > 0).flatten()
        assert torch.allclose(got[j, :int(m.sum())], want[r, pos], atol=1e-6), (j, r)
        assert (got[j, int(m.sum()):] == 0).all()
    assert stats["opd/adv_mean"] != 0
