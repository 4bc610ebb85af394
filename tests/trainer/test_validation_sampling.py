"""Validation sampling parameters (``val_temperature`` / ``val_top_p``): what the validation
requests carry on the embedded engine and in the rendered verl config; training rollouts keep theirs."""
from __future__ import annotations

import copy

import pytest

from components.data.synthetic import generate_problems
from components.stages.base import NullTracker
from components.trainer.embedded import EmbeddedTrainer
from components.trainer.train_config import TrainConfig


def parity_reward(texts, golds):
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


def sampled(model, tok, work, **kw):
    """(purpose, temperature, top_p) of every generate call of a 2-step run."""
    cfg = TrainConfig(method="grpo", method_config={"n": 2}, steps=2, batch_prompts=2, max_new_tokens=6, val_size=2,
                      val_samples=1, val_every=1, temperature=0.9, top_p=0.95, **kw)
    t = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, parity_reward, NullTracker())
    calls, generate = [], t.engine.generate

    def spy(reqs, params, purpose="train_rollout"):
        calls.append((purpose, params.temperature, params.top_p))
        return generate(reqs, params, purpose=purpose)
    t.engine.generate = spy
    problems = generate_problems(6, [3], seed=1)
    t.fit(problems, problems[:2], {"expert_traces": {}, "p0": {}}, work)
    return set(calls)


def test_validation_samples_at_its_own_top_p_and_temperature(model, tok, tmp_path):
    got = sampled(model, tok, tmp_path, val_top_p=0.7, val_temperature=1.0)
    assert got == {("validation", 1.0, 0.7), ("train_rollout", 0.9, 0.95)}


def test_unset_validation_sampling_is_the_training_rollouts(model, tok, tmp_path):
    assert sampled(model, tok, tmp_path) == {("validation", 0.9, 0.95), ("train_rollout", 0.9, 0.95)}
    assert "val_top_p" not in TrainConfig().model_dump()          # existing cache keys keep their meaning


def test_validation_sampling_is_math_only():
    with pytest.raises(ValueError, match="val_top_p"):
        TrainConfig(task="agentic", val_top_p=0.7)


def test_verl_config_carries_the_validation_sampling(tmp_path):
    pytest.importorskip("verl", reason="verl (the GPU backend) is not installed in this environment")
    from components.trainer.verl import hydra_config as vc

    c = vc.compose(vc.overrides(TrainConfig(val_top_p=0.7, val_temperature=1.0), model_path=tmp_path / "m",
                                work_dir=tmp_path / "w", n=8, project="p", experiment="e"))
    v = c.actor_rollout_ref.rollout.val_kwargs
    assert (v.top_p, v.temperature, v.do_sample) == (0.7, 1.0, True)
