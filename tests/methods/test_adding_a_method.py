"""docs/methods.md §13's worked example, run as written: the block registers a method and a
preset of it; both train on math with the embedded trainer and the method plays episodes."""
from __future__ import annotations

import copy
import re
import sys
import types
from pathlib import Path

import pytest
from tiny import TINY_TEST_POLICY, tiny_test_policy

from components.methods import registry

DOC = Path(__file__).resolve().parents[2] / "docs" / "methods.md"


@pytest.fixture
def example(monkeypatch):
    text = DOC.read_text().split("## 13.", 1)[1]
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    mod = types.ModuleType("first_seen_example")
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    exec(compile(code, str(DOC), "exec"), mod.__dict__)
    return mod


def test_the_example_trains_on_math(example, tmp_path):
    from components.data.synthetic import generate_problems
    from components.policy.tokenizer import build_tokenizer
    from components.stages.base import NullTracker
    from components.trainer.embedded import EmbeddedTrainer
    from components.trainer.train_config import TrainConfig

    assert registry.build("first_seen_16").config.n_new == 16
    tok = build_tokenizer()
    problems = generate_problems(6, [3], seed=1)
    cfg = TrainConfig(method="first_seen", method_config={"n": 2, "n_new": 4}, steps=2, batch_prompts=6,
                      max_new_tokens=8, val_size=0, lr=1e-3)
    t = EmbeddedTrainer(cfg, tiny_test_policy(tok), tok, lambda texts, golds: [(1.0, "r")] * len(texts),
                        NullTracker())
    t.fit(problems, [], {}, tmp_path)
    assert [h["rollouts"] for h in t.history] == [24.0, 12.0]     # all new, then all seen


def test_the_example_plays_episodes(example, tmp_path):
    from components.agentic.policy import build_agent_tokenizer
    from components.agentic.task import EpisodeTask
    from components.envs.sokoban import SokobanEnv
    from components.policy.model import TinyPolicyConfig, build_policy
    from components.stages.base import NullTracker
    from components.trainer.embedded import EmbeddedTrainer
    from components.trainer.train_config import TrainConfig

    tok = build_agent_tokenizer()
    model = build_policy(TinyPolicyConfig(**TINY_TEST_POLICY), tok, seed=1)
    cfg = TrainConfig(task="agentic", method="first_seen", method_config={"n": 1, "n_new": 2}, steps=2,
                      batch_prompts=2, val_size=0, max_new_tokens=6)
    boards = EpisodeTask(lambda: SokobanEnv(num_boxes=1, template="compact", max_steps=3))
    t = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, boards, NullTracker())
    t.fit([3, 4], [], {}, tmp_path)
    assert [h["rollouts"] for h in t.history] == [4.0, 2.0] and t.method.seen == {3, 4}
