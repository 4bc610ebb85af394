"""RL-ZVP token advantages (docs/methods.md TV9) and their use by the trainer."""
from __future__ import annotations

import torch
from tiny import tiny_test_policy

from components.algos.advantages import zero_variance_groups, zvp_token_advantages


def test_tv9_positive_and_negative():
    h = torch.tensor([[0.5, 1.2, 0.1]])
    m = torch.ones_like(h)
    pos = zvp_token_advantages(h, m, torch.tensor([True]), alpha=0.1)
    neg = zvp_token_advantages(h, m, torch.tensor([False]), alpha=0.1)
    assert torch.allclose(pos, torch.tensor([[0.05, 0.12, 0.01]]))
    assert torch.allclose(neg, torch.tensor([[-0.07, 0.0, -0.11]]))


def test_max_is_per_response_and_masked():
    h = torch.tensor([[0.5, 1.2, 9.0], [2.0, 1.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])       # 9.0 is padding: not the max
    neg = zvp_token_advantages(h, m, torch.tensor([False, False]), alpha=0.1)
    assert torch.allclose(neg, torch.tensor([[-0.07, 0.0, 0.0], [0.0, -0.1, -0.2]]))


def test_zero_variance_groups():
    r = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    g = ["a", "a", "b", "b", "c", "c", "d"]
    assert zero_variance_groups(r, g).tolist() == [True, True, False, False, True, True, True]


def test_trainer_learns_from_all_fail_groups(tmp_path):
    """With GRPO an all-zero-reward batch gives no update; RL-ZVP still trains."""
    import copy

    from components.data.synthetic import generate_problems
    from components.policy.tokenizer import build_tokenizer
    from components.stages.base import NullTracker
    from components.trainer.train_config import TrainConfig
    from components.trainer.embedded import EmbeddedTrainer

    tok = build_tokenizer()
    model = tiny_test_policy(tok)
    probs = generate_problems(4, [3], seed=2)
    never = lambda texts, golds: [(0.0, "wrong") for _ in texts]
    out = {}
    for method in ("grpo", "rl_zvp"):
        cfg = TrainConfig(method=method, method_config={"n": 4}, steps=1, batch_prompts=4, max_new_tokens=12,
                          val_size=0, lr=1e-2)
        t = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, never, NullTracker())
        t.fit(probs, [], {"expert_traces": {}, "p0": {}}, tmp_path / method)
        out[method] = t
    same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert same(out["grpo"].model, model)
    assert not same(out["rl_zvp"].model, model)
    assert out["rl_zvp"].history[-1]["train/trained_sequences"] == 16
