"""Allocators that only choose start states and sample counts run on episodes through the one
trainer (CERO on Sokoban: a short embedded run, its plan's counts, its state keyed by map seed,
resume); every allocator the registry does not apply to episodes is refused at validation in
one line naming it."""
from __future__ import annotations

import copy

import pytest
import torch
from tiny import TINY_TEST_POLICY

from components import lineage
from components.agentic.policy import build_agent_tokenizer
from components.agentic.task import EpisodeTask
from components.envs.sokoban import SokobanEnv
from components.methods import registry
from components.policy.model import TinyPolicyConfig, build_policy
from components.stages.base import NullTracker
from components.trainer.embedded import EmbeddedTrainer
from components.trainer.train_config import TrainConfig

# every allocator of the list and the graph presets: those on episodes, the refused rest
ON_EPISODES = {"cero", "vsr", "trace"}
MATH_ONLY = {"vigor", "vip", "greso", "sara", "sara_dps", "pair", "rail", "vip_graph", "vigor_graph",
             "greso_graph", "vigor_vsr", "vip_vsr"}
SEEDS = [3, 4, 5, 6]


def make():
    return SokobanEnv(num_boxes=1, template="compact", max_steps=4)


@pytest.fixture(scope="module")
def agent():
    tok = build_agent_tokenizer()
    return tok, build_policy(TinyPolicyConfig(**TINY_TEST_POLICY), tok, seed=1)


def cero_trainer(agent, steps: int) -> EmbeddedTrainer:
    tok, model = agent
    cfg = TrainConfig(task="agentic", method="cero", method_config={"n_mean": 2, "n_min": 1, "n_max": 4},
                      steps=steps, batch_prompts=2, ckpt_every=1, val_size=0, lr=1e-3, max_new_tokens=6)
    torch.manual_seed(0)
    return EmbeddedTrainer(cfg, copy.deepcopy(model), tok, EpisodeTask(make), NullTracker())


def test_cero_trains_on_sokoban_and_resumes_identically(agent, tmp_path):
    full = cero_trainer(agent, 3)
    full.fit(SEEDS, [], {}, tmp_path / "a")
    steps = [h for h in full.history if "method/rollouts" in h]
    assert len(steps) == 3 and all(1 <= h["method/n_min"] <= h["method/n_max"] <= 4 for h in steps)
    # the episodes a step plays are the plan's counts; the band keeps each step near n_mean x B
    assert [h["rollouts"] for h in steps] == [h["method/rollouts"] for h in steps]
    assert all(0.75 * 4 <= h["rollouts"] <= 1.25 * 4 for h in steps)
    state = full.method.state_dict()
    assert state["posterior"] and set(state["posterior"]) | set(state["N"]) <= {str(s) for s in SEEDS}
    assert full.summary()["task"] == "agentic" and full.summary()["method"] == "cero"
    part = cero_trainer(agent, 2)
    part.fit(SEEDS, [], {}, tmp_path / "b")
    resumed = cero_trainer(agent, 3)
    resumed.fit(SEEDS, [], {}, tmp_path / "b")
    strip = lambda h: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in h]  # noqa: E731
    assert strip(resumed.history) == strip(full.history)
    assert resumed.method.state_dict() == state
    for p, q in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(p, q)


def test_the_registry_says_which_allocators_run_on_episodes():
    agentic = set(registry.available("agentic"))
    assert ON_EPISODES <= agentic and not MATH_ONLY & agentic
    assert MATH_ONLY <= set(registry.available("math"))


@pytest.mark.parametrize("name", sorted(MATH_ONLY))
def test_an_allocator_without_an_episodic_form_is_refused_by_name(name):
    with pytest.raises(lineage.StageError) as e:
        lineage.check_params("train", {"task": "agentic", "method": name})
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"stage 'train': params.method: method '{name}' does not apply "
                                             "to task agentic"), msg
