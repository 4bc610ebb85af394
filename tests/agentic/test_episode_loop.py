"""The trainers run the one fit loop (components/trainer/loop.py) with the episodic task's
hooks (components/agentic/task.py); each backend supplies only its parts."""
from __future__ import annotations

import copy

import pytest
import torch
from tiny import TINY_TEST_POLICY

from components.trainer.train_config import TrainConfig
from components.agentic.policy import build_agent_tokenizer
from components.agentic.task import EpisodeLoop, EpisodeTask
from components.trainer.embedded import EmbeddedTrainer
from components.envs.sokoban import SokobanEnv
from components.policy.model import TinyPolicyConfig, build_policy
from components.stages.base import NullTracker
from components.trainer.loop import FitLoop

LOOP_STEPS = ("run_loop", "_log", "write_records", "training_set", "validation_metrics")
BACKEND_PARTS = ("play", "update", "restore", "save_checkpoint", "log_metrics")


def make():
    return SokobanEnv(num_boxes=1, template="compact", max_steps=4)


def test_both_episodic_backends_run_the_one_loop():
    pytest.importorskip("verl", reason="verl is not installed: the verl episodic trainer cannot be imported")
    from components.trainer.verl.trainer import EpisodePPOTrainer

    assert issubclass(EpisodePPOTrainer, EpisodeLoop) and isinstance(EpisodeLoop.task, EpisodeTask)
    for cls in (EmbeddedTrainer, EpisodePPOTrainer):
        assert issubclass(cls, FitLoop), cls
        for name in LOOP_STEPS:      # the loop's own steps: EpisodeLoop's or FitLoop's, never the backend's
            assert getattr(cls, name) in (getattr(EpisodeLoop, name), getattr(FitLoop, name)), (cls.__name__, name)
        for name in BACKEND_PARTS:   # the backend's parts: defined by the backend (its class or its base)
            assert getattr(cls, name) not in (getattr(EpisodeLoop, name, None), getattr(FitLoop, name, None)), (
                cls.__name__, name)


def test_step_token_counts_add_up_with_discarded_tokens(tmp_path):
    """Tokens a backend generates and drops during the rollout (verl: the padding rows) are
    training cost: in tokens/generated, tokens/discarded, the cumulative curve and the summary
    alike (the tokens stage counts them the same way), so the per-update counts add up."""
    tok = build_agent_tokenizer()
    model = build_policy(TinyPolicyConfig(**TINY_TEST_POLICY), tok, seed=1)

    class Padded(EmbeddedTrainer):
        def play(self, starts, seed, purpose="train_rollout"):
            runs = super().play(starts, seed, purpose)
            self.meter.record("discarded", prompt_tokens=0, generated_tokens=1000, sequences=1, requests=0)
            return runs

    cfg = TrainConfig(task="agentic", method="grpo", method_config={"n": 2}, steps=2, batch_prompts=2,
                      val_size=0, max_new_tokens=6, ckpt_every=5)
    torch.manual_seed(0)
    t = Padded(cfg, copy.deepcopy(model), tok, EpisodeTask(make), NullTracker())
    summary = t.fit([3, 4, 5], [], {}, tmp_path)
    steps = [h for h in t.history if "tokens/generated" in h]
    assert len(steps) == 2 and t.meter.totals("discarded")["generated_tokens"] == 2000
    assert sum(h["tokens/generated"] for h in steps) == summary["generated_tokens"] > 2000
    assert sum(h["tokens/discarded"] for h in steps) == summary["discarded_tokens"] == 2000
    assert summary["kept_generated_tokens"] == summary["generated_tokens"] - 2000 == t.meter.totals("train_rollout")["generated_tokens"]
    assert steps[-1]["tokens/generated_cum"] == summary["generated_tokens"]
