"""TRACE on episodes: features, the logistic step and the anchor draw by hand; the tree of
anchors built from played episodes; budget, replayable starts, state round trip; two updates
of the episodic trainer (real engine, tiny random policy: mechanics, not skill)."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from tiny import TINY_TEST_POLICY

from components.trainer.train_config import TrainConfig
from components.agentic.policy import build_agent_tokenizer
from components.agentic.rollout import EpisodeContext, EpisodeGroup, EpisodeRun, Start, TurnRecord, rollout_episodes
from components.methods.trace import TRACE, draw, features, logistic_step
from components.agentic.task import EpisodeTask
from components.trainer.embedded import EmbeddedTrainer
from components.engine.base import SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.envs.sokoban import SokobanEnv
from components.methods.registry import build
from components.policy.model import TinyPolicyConfig, build_policy
from components.stages.base import NullTracker


def make():
    return SokobanEnv(num_boxes=1, template="compact", max_steps=6)


def context(eng, step: int, seed: int = 1) -> EpisodeContext:
    return EpisodeContext(lambda starts, s: rollout_episodes(eng, make, starts, SamplingParams(1.0, 1.0, 6, s)),
                          seed, step)


def groups(*runs: EpisodeRun) -> list[EpisodeGroup]:
    """The runs grouped by start, in order."""
    out: dict[str, EpisodeGroup] = {}
    for r in runs:
        out.setdefault(r.start.group_id(), EpisodeGroup(r.start, [])).runs.append(r)
    return list(out.values())


def test_features_hand():
    assert features(3, 1.2, 1, -0.1, 0.25, 15).tolist() == pytest.approx([1, 0.2, 0.12, 1 / 3, -0.1, 0.25, 0])
    assert features(0, 0.0, 0, 0.0, 0.5, 15).tolist() == [1, 0, 0, 0, 0, 0.5, 1]


def test_logistic_step_hand():
    # sigmoid(0) = 1/2; residuals (-1/2, 1/2); X^T r / 2 = (0, 1/4)
    w = logistic_step(np.zeros(2), np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([1.0, 0.0]), lr=1.0, l2=0.0)
    assert w.tolist() == pytest.approx([0.0, -0.25])


def test_draw_hand():
    s = np.array([0.1, 0.25, 0.25, 0.0])
    assert draw(s, 2, 0.01, "top", np.random.default_rng(0)) == [1, 2]
    a = draw(s, 3, 0.01, "proportional", np.random.default_rng(4))
    assert a == draw(s, 3, 0.01, "proportional", np.random.default_rng(4)) and len(set(a)) == 3
    assert draw(s, 9, 0.01, "top", np.random.default_rng(0)) == [0, 1, 2, 3]


def played(seed, actions, rewards, won, start=None):
    run = EpisodeRun(start or Start(seed, (), f"{seed}", 2))
    for a, r in zip(actions, rewards):
        run.turns.append(TurnRecord((5,), (7, 1), a, r, "x", a != "??", "stop"))
    run.won, run.done = won, True
    return run


def test_tree_of_anchors_from_played_episodes(agent):
    t = TRACE(TRACE.Config(n=2, horizon=10))
    runs = [played(7, ["up", "??", "left"], [-0.1, -0.1, 10.9], True), played(7, ["down", "down"], [-0.1, -0.1], False)]
    t.observe(groups(*runs))
    assert t.p0[7] == 0.5
    # anchors: every prefix the episode went on from (not the last one)
    keys = sorted(json.loads(k)[1:] for k in t.anchors)
    assert keys == [["down"], ["up"], ["up", "??"]]
    a = t.anchors[json.dumps([7, "up", "??"])]
    assert a[2:6] == [2, pytest.approx(-0.2), 1, -0.1]
    # the predictor learned: the winning branch's prefix scores higher than the losing one's
    p_up, p_down = t.predict([t.anchors[json.dumps([7, "up", "??"])], t.anchors[json.dumps([7, "down"])]])
    assert p_up > p_down
    # the next update draws among roots and these prefixes; a prefix start replays its actions
    tok, model = agent
    played_groups = t.rollout([1, 2, 3], context(HFEngine(model, tok, meter=TokenMeter()), step=1),
                              np.random.default_rng(0))
    starts = [g.start for g in played_groups]
    assert len(starts) == 3 and sum(len(g.runs) for g in played_groups) == t.rollouts_per_step(3) == 6
    assert len({s.group_id() for s in starts}) == 3
    # a continuation from a prefix extends the same tree: its prefixes carry the anchor's history
    pre = Start(7, ("up", "??"), json.dumps([7, "up", "??"]), 2, (("anchor", json.dumps([7, "up", "??"])),))
    t.observe(groups(played(7, ["left", "up"], [0.9, -0.1], False, pre)))
    deeper = t.anchors[json.dumps([7, "up", "??", "left"])]
    assert deeper[2:6] == [3, pytest.approx(0.7), 1, 0.9]


def test_state_round_trip_and_window(agent):
    t = TRACE(TRACE.Config(window_steps=2))
    t.observe(groups(played(3, ["up", "up"], [-0.1, 10.9], True)))
    other = TRACE(t.config)
    other.load_state_dict(json.loads(json.dumps(t.state_dict())))
    assert other.state_dict() == t.state_dict()
    tok, model = agent
    t.rollout([1], context(HFEngine(model, tok, meter=TokenMeter()), step=2), np.random.default_rng(0))
    assert not t.anchors                                            # older than the window


@pytest.fixture(scope="module")
def agent():
    tok = build_agent_tokenizer()
    return tok, build_policy(TinyPolicyConfig(**TINY_TEST_POLICY), tok, seed=1)


def test_starts_replay_in_the_environment(agent):
    tok, model = agent
    t = build("trace", {"n": 2}, task="agentic")
    eng = HFEngine(model, tok, meter=TokenMeter())
    t.observe(t.rollout([3, 4], context(eng, 0), np.random.default_rng(0)))
    again = [r for g in t.rollout([5, 6], context(eng, 1, seed=2), np.random.default_rng(1)) for r in g.runs]
    assert len(again) == 4 and all(r.actions[:len(r.start.prefix)] == r.start.prefix for r in again)


def test_trainer_runs_trace(agent, tmp_path):
    tok, model = agent
    cfg = TrainConfig(task="agentic", method="trace", method_config={"n": 2}, steps=2, batch_prompts=2,
                      ckpt_every=1, val_size=0, lr=1e-3, max_new_tokens=6)
    torch.manual_seed(0)
    tr = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, EpisodeTask(make), NullTracker())
    tr.fit([3, 4, 5], [], {}, tmp_path)
    rows = [h for h in tr.history if "train/loss" in h]
    assert len(rows) == 2 and any("method/anchors" in h for h in tr.history)
