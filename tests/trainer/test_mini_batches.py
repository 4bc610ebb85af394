"""Several optimizer steps per training step (verl's ``ppo_mini_batch_size`` / ``ppo_epochs``):
the embedded update against the same PPO steps written out here, the config's rules, and
the verl mapping."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from components.data.synthetic import generate_problems
from components.stages.base import NullTracker
from components.trainer.embedded import EmbeddedTrainer, mini_batch_bounds
from components.trainer.train_config import TrainConfig


def parity_reward(texts, golds):
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


@pytest.fixture(scope="module")
def problems():
    return generate_problems(12, [3], seed=1)


def trainer(model, tok, **kw):
    cfg = TrainConfig(**{"method": "grpo", "method_config": {"n": 8}, "batch_prompts": 8, "max_new_tokens": 12,
                         "lr": 1e-3, "steps": 1, "val_size": 0, **kw})
    return EmbeddedTrainer(cfg, copy.deepcopy(model), tok, parity_reward, NullTracker())


def step_groups(t, problems, tok):
    res = {"expert_traces": {p.uid: p.traces[0] for p in problems}, "p0": {}}
    train_set = t.training_set(problems, {**res, "tokenizer": tok})
    with t.meter.tagged(step=0):
        return t.method.rollout(train_set[:t.cfg.batch_prompts], t.task.context(t, 0, t.cfg.seed),
                                np.random.default_rng(0))


def ppo_step_by_hand(model, opt, groups, old_model, clip=0.2, dual_clip=3.0):
    """One optimizer step on ``groups``: GRPO z-scores, the clipped ratio against ``old_model``
    (the rollout policy), the seq-mean-token-mean of the per-token loss, one sequence at a time."""
    seq_losses = []
    for g in groups:
        r = torch.tensor(g.rewards, dtype=torch.float64)
        adv = ((r - r.mean()) / (r.std() + 1e-6)).float()
        for resp, a in zip(g.responses, adv):
            ids = torch.tensor([list(g.context_ids) + list(resp)])
            n_ctx = len(g.context_ids)

            def resp_logp(m):
                logits = m(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, :-1].float()
                return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0][n_ctx - 1:]
            with torch.no_grad():
                old = resp_logp(old_model)
            ratio = torch.exp(resp_logp(model) - old)
            per_tok = torch.maximum(-a * ratio, -a * ratio.clamp(1 - clip, 1 + clip))
            if a < 0:
                per_tok = torch.minimum(per_tok, -a * dual_clip)
            seq_losses.append(per_tok.mean())
    opt.zero_grad()
    torch.stack(seq_losses).mean().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def test_four_mini_batches_are_four_sequential_ppo_steps(model, tok, problems):
    t = trainer(model, tok, ppo_mini_batch_size=2)
    groups = step_groups(t, problems, tok)
    assert all(0 < sum(g.rewards) < g.n for g in groups), "every group mixed, so every mini-batch has a gradient"
    base = copy.deepcopy(t.model)
    by_hand = copy.deepcopy(base)
    opt = torch.optim.AdamW(by_hand.parameters(), lr=1e-3, weight_decay=0.0)

    stats = t.update(groups)

    assert stats["optimizer_steps"] == 4 == t.cfg.updates_per_step
    assert {int(s["step"]) for s in t.opt.state.values()} == {4}
    for i in range(4):
        ppo_step_by_hand(by_hand, opt, groups[2 * i:2 * i + 2], base)
    for (name, a), b in zip(t.model.named_parameters(), by_hand.parameters()):
        assert torch.allclose(a, b, atol=2e-6, rtol=1e-4), name
    # and not what one whole-batch step gives
    whole = trainer(model, tok)
    whole.update(groups)
    assert whole.opt.state and {int(s["step"]) for s in whole.opt.state.values()} == {1}
    assert not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(whole.model.parameters(), t.model.parameters()))


def test_epochs_pass_over_every_mini_batch(model, tok, problems):
    t = trainer(model, tok, ppo_mini_batch_size=4, ppo_epochs=3)
    stats = t.update(step_groups(t, problems, tok))
    assert stats["optimizer_steps"] == 6 == t.cfg.updates_per_step


def test_mini_batches_hold_whole_groups():
    assert mini_batch_bounds([8] * 8, 4) == [(0, 16), (16, 32), (32, 48), (48, 64)]
    # variable group sizes (VSR's replays, DAPO's refills): groups stay whole, as even as they split
    assert mini_batch_bounds([4, 8, 2, 6, 4], 2) == [(0, 14), (14, 24)]
    assert mini_batch_bounds([4, 4], 4) == [(0, 4), (4, 8)]


@pytest.mark.parametrize("kw,match", [
    ({"batch_prompts": 160, "ppo_mini_batch_size": 48}, "does not divide batch_prompts 160"),
    ({"batch_prompts": 16, "ppo_mini_batch_size": 32}, "does not divide"),
    ({"task": "agentic", "method": "grpo", "ppo_mini_batch_size": 2}, "ppo_mini_batch_size"),
])
def test_config_refuses_a_mini_batch_that_does_not_split_the_batch(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kw)


def test_default_is_one_step_and_leaves_the_dump_unchanged():
    c = TrainConfig(batch_prompts=160, ppo_epochs=4)
    assert (c.mini_batches, c.updates_per_step) == (1, 4)
    assert "ppo_mini_batch_size" not in c.model_dump()          # existing cache keys keep their meaning
    assert TrainConfig(batch_prompts=160, ppo_mini_batch_size=32).model_dump()["ppo_mini_batch_size"] == 32


def test_verl_mapping_carries_the_mini_batch(tmp_path):
    pytest.importorskip("verl", reason="verl (the GPU backend) is not installed in this environment")
    from components.trainer.verl import hydra_config as vc

    for mb, want in ((32, 32), (None, 160)):
        cfg = TrainConfig(batch_prompts=160, ppo_mini_batch_size=mb, ppo_epochs=4, method_config={"n": 8})
        c = vc.compose(vc.overrides(cfg, model_path=tmp_path / "m", work_dir=tmp_path / "w", n=8, project="p",
                                    experiment="e"))
        a = c.actor_rollout_ref.actor
        assert (c.data.train_batch_size, a.ppo_mini_batch_size, a.ppo_epochs) == (160, want, 4)


def test_verl_update_splits_the_rows_into_the_configs_mini_batches():
    """verl's side without workers: the rows padded (loss-free) to a multiple of the mini-batch
    count x dp x micro-batch, then handed to verl's update as that many mini-batches, the loss
    divisor per mini-batch (the real rows / k)."""
    pytest.importorskip("verl", reason="verl (the GPU backend) is not installed in this environment")
    from omegaconf import OmegaConf
    from verl import DataProto

    from components.methods.base import Group
    from components.trainer.verl.dataproto import groups_to_dataproto
    from components.trainer.verl.trainer import RLVRPPOTrainer, update_actor_on_rows

    seen = {}

    class Actor:
        def update_actor(self, td):
            from verl.utils import tensordict_utils as tu
            from tensordict import TensorDict
            seen.update(rows=td.shape[0], mini=tu.get(td, "mini_batch_size"), divisor=tu.get(td, "global_batch_size"))
            out = TensorDict({}, batch_size=[])
            tu.assign_non_tensor(out, metrics={"pg_loss": [0.0]})
            return out

    t = RLVRPPOTrainer.__new__(RLVRPPOTrainer)
    t.cfg = TrainConfig(batch_prompts=4, ppo_mini_batch_size=1, method_config={"n": 3})
    t.config = OmegaConf.create({"trainer": {"balance_batch": False}, "actor_rollout_ref": {
        "rollout": {"temperature": 1.0}, "actor": {"calculate_entropy": False, "ppo_epochs": 1,
                                                   "data_loader_seed": 0, "shuffle": False}}})
    t.actor_rollout_wg, t.use_reference_policy = Actor(), False
    t._get_dp_size = lambda wg, role: 2
    t._compute_old_log_prob = lambda d: (DataProto.from_dict({"old_log_probs": torch.zeros_like(
        d.batch["response_mask"], dtype=torch.float32), "entropys": torch.zeros_like(
        d.batch["response_mask"], dtype=torch.float32)}), None)
    groups = [Group(uid=f"u{i}", problem_uid=f"p{i}", answer="1", context_ids=(1, 2), prompt_len=2, responses=[(3, 4)] * 3,
                    texts=["x"] * 3, rewards=[1.0, 0.0, 0.0]) for i in range(4)]
    data = groups_to_dataproto(groups, pad_id=0, response_length=4)
    data.batch["advantages"] = torch.ones_like(data.batch["response_mask"], dtype=torch.float32)
    metrics = update_actor_on_rows(t, data, micro_batch=2, metrics={})
    # 12 rows -> 16 (a multiple of 4 mini-batches x dp 2 x micro-batch 2): 4 mini-batches of 4 rows
    assert metrics["pad_rows"] == 4 and seen == {"rows": 16, "mini": 4, "divisor": 3}
