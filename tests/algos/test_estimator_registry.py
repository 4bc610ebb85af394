"""One advantage-estimator registry for both tasks (verl's ``register_adv_est``): every name a
train config accepts is registered, and each entry computes what its function does directly."""
from __future__ import annotations

import typing
from types import SimpleNamespace

import pytest
import torch

from components.algos.advantages import ADV_ESTIMATORS, adv_estimator, grpo_advantages, rloo_advantages
from components.algos.gigpo import Episode, gigpo_advantages
from components.trainer.train_config import ESTIMATORS, TrainConfig


def test_every_configurable_estimator_is_registered():
    names = set(typing.get_args(TrainConfig.model_fields["adv_estimator"].annotation))
    assert names == set(ADV_ESTIMATORS) == {e for task in ESTIMATORS.values() for e in task}
    assert names == {"grpo", "drgrpo", "rloo", "gigpo", "episode"}
    with pytest.raises(KeyError, match="unknown advantage estimator 'ppo'"):
        adv_estimator("ppo")


def test_outcome_estimators():
    seqs = SimpleNamespace(rewards=torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0]), group_ids=["a", "a", "a", "b", "b"])
    assert torch.equal(adv_estimator("grpo")(seqs, None), grpo_advantages(seqs.rewards, seqs.group_ids))
    assert adv_estimator("drgrpo")(seqs, None).tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0])
    assert torch.equal(adv_estimator("rloo")(seqs, None), rloo_advantages(seqs.rewards, seqs.group_ids))


def test_episode_estimators():
    eps = [Episode("g", ["s0", "s1"], [-0.1, 1.0]), Episode("g", ["s0", "s2"], [-0.1, -0.1])]
    cfg = TrainConfig(task="agentic", gamma=1.0)
    both = adv_estimator("gigpo")(eps, cfg)
    outcome = adv_estimator("episode")(eps, cfg)
    assert both == gigpo_advantages(eps, gamma=1.0).advantages
    assert outcome == gigpo_advantages(eps, gamma=1.0, step_weight=0.0).advantages
    assert outcome[0][0] == outcome[0][1] and both[0][0] != outcome[0][0]   # the step term at s0
