"""The README's "Adding a method" example, run as written: the block is saved as the module it
names (``my_methods``), registered, named in a sweep, built from its config and trained for two
steps by the embedded trainer on the tiny policy."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from tiny import tiny_test_policy

from components.data.synthetic import generate_problems
from components.methods import registry
from components.methods.base import Group
from components.policy.tokenizer import build_tokenizer
from components.stages.base import NullTracker
from components.sweep import Sweep
from components.trainer.embedded import EmbeddedTrainer
from components.trainer.train_config import TrainConfig

README = Path(__file__).resolve().parents[2] / "README.md"


def example() -> str:
    section = README.read_text().split("## Adding a method", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the README's 'Adding a method' section holds one python block"
    return blocks[0]


@pytest.fixture
def my_methods(tmp_path, monkeypatch):
    (tmp_path / "my_methods.py").write_text(example())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))   # the registration is undone after
    yield importlib.import_module("my_methods")
    import sys
    sys.modules.pop("my_methods", None)


def _group(rewards):
    return Group(uid="q", problem_uid="q", answer="1", context_ids=(1,), prompt_len=1, responses=[(5,)] * len(rewards),
                 texts=[""] * len(rewards), rewards=rewards)


def test_readme_method_registers_builds_and_trains(my_methods, tmp_path):
    assert "mixed_weight" in registry.available()
    m = registry.build("mixed_weight", {"floor": 0.25})
    assert m.advantage_weight(_group([1.0, 0.0])) == 1.0 and m.advantage_weight(_group([0.0, 0.0])) == 0.25
    with pytest.raises(ValueError, match="floor"):
        registry.build("mixed_weight", {"floor": 2.0})
    Sweep.model_validate({"name": "x", "seeds": [0], "models": ["tiny"], "model_specs": {"tiny": {}},
                          "methods": ["grpo", "mixed_weight"], "method_config": {"mixed_weight": {"floor": 0.25}}})

    tok = build_tokenizer()
    probs = generate_problems(8, [3], seed=5)
    cfg = TrainConfig(method="mixed_weight", method_config={"floor": 0.25}, steps=2, batch_prompts=4,
                      max_new_tokens=12, val_size=2, val_samples=1, seed=3)
    t = EmbeddedTrainer(cfg, tiny_test_policy(tok), tok,
                        lambda texts, golds: [(float(len(x) % 3 == 0), "rule") for x in texts], NullTracker())
    summary = t.fit(probs, probs[:2], {"expert_traces": {}, "p0": {}}, tmp_path)
    assert summary["steps"] == 2 and len([h for h in t.history if "train/loss" in h]) == 2
