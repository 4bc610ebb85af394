"""Multi-turn rollouts, VSR on episodes, GiGPO rows and the episodic trainer (real engine,
real tiny Qwen2 policy with random weights: mechanics, not skill)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from tiny import TINY_TEST_POLICY

from components.trainer.train_config import TrainConfig
from components.agentic.policy import build_agent_tokenizer
from components.agentic.rollout import (EpisodeContext, EpisodeGroup, EpisodeRun, Start, TurnRecord, episode_runs,
                                        rollout_episodes)
from components.agentic.task import EpisodeTask, turn_rows
from components.trainer.embedded import EmbeddedTrainer
from components.engine.base import SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.envs import replay
from components.envs.sokoban import SokobanEnv
from components.methods.registry import build, method_config
from components.policy.model import TinyPolicyConfig, build_policy
from components.stages.base import NullTracker
from components.trainer.sequences import build_sequences


def make():
    return SokobanEnv(num_boxes=1, template="compact", max_steps=6)


@pytest.fixture(scope="module")
def atok():
    return build_agent_tokenizer()


@pytest.fixture(scope="module")
def amodel(atok):
    return build_policy(TinyPolicyConfig(**TINY_TEST_POLICY), atok, seed=1)


def engine(model, tok):
    return HFEngine(model, tok, meter=TokenMeter())


def context(eng, step: int = 0, seed: int = 3) -> EpisodeContext:
    return EpisodeContext(lambda starts, s: rollout_episodes(eng, make, starts, SamplingParams(1.0, 1.0, 6, s)),
                          seed, step)


def group(*runs: EpisodeRun) -> EpisodeGroup:
    return EpisodeGroup(runs[0].start, list(runs))


def states(vsr) -> list[tuple]:
    return vsr.prefix_states()


def solved_run(seed: int, prefix_len: int = 0) -> EpisodeRun:
    """A won episode played by the BFS plan (as if the policy had written it)."""
    env = make()
    env.reset(seed)
    plan = env.optimal_plan()
    run = EpisodeRun(Start(seed, tuple(plan[:prefix_len]), f"{seed}"))
    for a in plan[:prefix_len]:
        env.step(a)
    for a in plan[prefix_len:]:
        anchor = env.anchor()
        _, r, done, info = env.step(a)
        run.turns.append(TurnRecord((5, 6), (7, 1), a, r, anchor, True, "stop"))
    run.won, run.done = bool(info["won"]), True
    return run


def test_rollout_is_deterministic_metered_per_turn_and_replays(amodel, atok):
    starts = [Start(3, (), "3", 3), Start(4, ("up", "left"), "4@2", 2)]
    e1, e2 = engine(amodel, atok), engine(amodel, atok)
    a = rollout_episodes(e1, make, starts, SamplingParams(1.0, 1.0, 6, seed=11))
    b = rollout_episodes(e2, make, starts, SamplingParams(1.0, 1.0, 6, seed=11))
    assert [r.actions for r in a] == [r.actions for r in b] and len(a) == 5
    # every generated token is metered, per turn; the n episodes of a group share turn 0's prompt
    tot = e1.meter.totals("train_rollout")
    assert tot["generated_tokens"] == sum(r.generated_tokens for r in a)
    assert tot["sequences"] == sum(len(r.turns) for r in a)
    turn0 = [row for row in e1.meter.to_rows() if row["turn"] == 0]
    assert sum(row["requests"] for row in turn0) == 2 and sum(row["sequences"] for row in turn0) == 5
    for r in a:
        assert r.done and r.length == min(6, r.length) and r.actions[:len(r.start.prefix)] == r.start.prefix
        # the recorded context of each generated turn is the prompt of the replayed state
        for t, turn in enumerate(r.turns):
            env, _ = replay(make, r.start.seed, r.actions[:len(r.start.prefix) + t])
            assert atok.decode(turn.context_ids) == env.prompt() and turn.anchor == env.anchor()


def test_unparsable_replies_are_invalid_moves_not_errors(amodel, atok):
    # random weights write mostly garbage: the episode still runs to max_steps with penalties
    runs = rollout_episodes(engine(amodel, atok), make, [Start(5, (), "5", 2)], SamplingParams(1.0, 1.0, 6, 0))
    bad = [t for r in runs for t in r.turns if not t.valid]
    assert bad and all(t.reward == pytest.approx(-0.1) for t in bad)


def test_observations_and_replayed_turns_never_reach_the_loss(amodel, atok):
    runs = rollout_episodes(engine(amodel, atok), make, [Start(4, ("up", "left"), "g", 3)],
                            SamplingParams(1.0, 1.0, 6, 2))
    cfg = TrainConfig(task="agentic")
    rows = turn_rows(runs, cfg)
    assert len(rows) == sum(len(r.turns) for r in runs)     # no row for the 2 replayed turns
    seqs = build_sequences(rows, atok.pad_token_id)
    for i, g in enumerate(rows):
        m = seqs.response_mask[i]
        n_ctx, n_resp = len(g.context_ids), len(g.responses[0])
        assert m[:n_ctx].sum() == 0 and m[n_ctx:n_ctx + n_resp].sum() == n_resp and m.sum() == n_resp
        # the context holds the observation (board rows) and the replayed actions' history
        assert "#" in atok.decode(g.context_ids) or "_" in atok.decode(g.context_ids)


def test_gigpo_rows_match_hand_computation():
    # two episodes from one start: same first state, returns -0.1+... ; A = A^E + A^S
    runs = [solved_run(18), solved_run(18)]
    runs[1].turns[-1].reward -= 1.0          # pretend the second one lost a point at the end
    rows = turn_rows(runs, TrainConfig(task="agentic", gamma=1.0))
    R = [sum(t.reward for t in r.turns) for r in runs]
    mean = sum(R) / 2                           # equal lengths: step-row mean = episode mean
    for i, r in enumerate(runs):
        for t in range(len(r.turns)):
            g_i = sum(x.reward for x in r.turns[t:])
            g_all = [sum(x.reward for x in q.turns[t:]) for q in runs]
            want = (R[i] - mean) + (g_i - sum(g_all) / 2)   # same anchors at every t (same plan)
            assert rows[i * len(r.turns) + t].meta["advantages"][0] == pytest.approx(want)


def test_vsr_on_episodes_buffer_scores_budget_and_masking(amodel, atok):
    vsr = build("vsr", {"n": 2, "rho": 0.5}, task="agentic")
    assert vsr.config.cut_points == "every" and not vsr.config.expert_seed    # the task's defaults
    vsr.setup([18, 8, 9, 10], {"p0": {18: 0.25}})
    vsr.observe([group(solved_run(18), solved_run(18))])         # a fresh group: p0 = 1.0 then
    assert list(vsr.buffer) == [18] and vsr.p0[18] == 1.0
    vsr.p0[18] = 0.25
    L = len(vsr.buffer[18].response_ids)
    assert [c for _, c, _ in states(vsr)] == list(range(1, L))
    for _, cut, w in states(vsr):                                # sigma_hat of the interpolation
        p = (1 - cut / L) * 0.25 + cut / L
        assert w == pytest.approx(np.sqrt(p * (1 - p)))
    eng = engine(amodel, atok)
    groups = vsr.rollout([8, 9, 10, 11], context(eng, step=1), np.random.default_rng(0))
    replays = [g.start for g in groups if g.is_replay]
    assert len(groups) == 4 and len(replays) == 2 and [g.problem_uid for g in groups[:2]] == [8, 9]
    assert all(s.seed == 18 and 0 < len(s.prefix) < L for s in replays)
    assert all(g.meta["alpha"] == len(g.start.prefix) / L for g in groups if g.is_replay)
    runs = episode_runs(groups)
    assert len(runs) == vsr.rollouts_per_step(4) == 8
    rows = turn_rows(runs, TrainConfig(task="agentic"))
    assert len(rows) == sum(len(r.turns) for r in runs) < sum(r.length for r in runs)
    # uniform replay: every state weighs the same; no recency: the buffer stops changing
    uni = build("vsr_no_scoring", {}, task="agentic")
    uni.setup([18], {})
    uni.observe([group(solved_run(18))])
    assert {w for _, _, w in states(uni)} == {1.0}
    frozen = build("vsr_no_recency", {"freeze_after": 1, "window_steps": 2}, task="agentic")
    frozen.setup([18, 21], {})
    frozen.observe([group(solved_run(18))])
    frozen.step = 5
    frozen.observe([group(solved_run(21))])
    frozen.rollout([1], context(eng, step=50), np.random.default_rng(0))
    assert list(frozen.buffer) == [18]
    # recency window: an episode older than window_steps is evicted
    vsr.rollout([1], context(eng, step=1 + 40), np.random.default_rng(0))
    assert not vsr.buffer
    with pytest.raises(KeyError, match="'sft' does not apply to task agentic"):
        method_config("sft", {}, "agentic")


def test_state_dict_round_trip():
    vsr = build("vsr", {}, task="agentic")
    vsr.setup([18, 29], {})
    vsr.step = 3
    vsr.observe([group(solved_run(18)), group(solved_run(29))])
    other = build("vsr", {}, task="agentic")
    other.setup([18, 29], {})
    other.load_state_dict(json_copy(vsr.state_dict()))
    assert states(other) == states(vsr) and list(other.buffer) == list(vsr.buffer)
    assert other.p0 == vsr.p0 and all(isinstance(k, int) for k in other.p0)


def json_copy(state):
    import json

    return json.loads(json.dumps(copy.deepcopy(state)))


def test_trainer_resume_continues_identically(amodel, atok, tmp_path):
    cfg = TrainConfig(task="agentic", method="vsr", method_config={"n": 2}, steps=2, batch_prompts=2,
                      ckpt_every=1, val_size=0, lr=1e-3, max_new_tokens=6)

    def fresh():
        torch.manual_seed(0)
        return EmbeddedTrainer(cfg, copy.deepcopy(amodel), atok, EpisodeTask(make), NullTracker())

    full = fresh()
    full.fit([3, 4, 5], [], {}, tmp_path / "a")
    part = fresh()
    part.cfg = cfg.model_copy(update={"steps": 1})
    part.fit([3, 4, 5], [], {}, tmp_path / "b")
    resumed = fresh()
    resumed.fit([3, 4, 5], [], {}, tmp_path / "b")
    strip = lambda h: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in h]  # noqa: E731
    assert strip(resumed.history) == strip(full.history)
    for p, q in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(p, q)
    s = full.summary()
    assert s["generated_tokens"] == sum(r["tokens/generated"] for r in full.history)


# an allocator's config whose step spends exactly its budget (CERO: no band around n_mean x B)
CONTRACT_CONFIG = {"cero": {"n_mean": 2, "n_min": 1, "n_max": 4, "step_band": 0.0}}
FRESH_ONLY = {"grpo", "cero"}      # methods that only choose map seeds and counts: no replays


@pytest.mark.parametrize("name", __import__("components.methods.registry", fromlist=["x"]).available("agentic"))
def test_episodic_method_contract(name, amodel, atok):
    """Every method that applies to episodes: the budget it promises is what it generates, every
    generated token is metered, its state survives JSON, and replayed turns never become rows."""
    config = CONTRACT_CONFIG.get(name, {"n": 2})
    m = build(name, config, task="agentic")
    m.setup([18, 21, 29, 3], {"p0": {18: 0.5}})
    m.observe([group(solved_run(18)), group(solved_run(21))])
    eng = engine(amodel, atok)
    groups = m.rollout([29, 3, 18, 21], context(eng, step=1, seed=5), np.random.default_rng(1))
    runs = episode_runs(groups)
    assert len(runs) == m.rollouts_per_step(4) == 8
    assert eng.meter.totals()["generated_tokens"] == sum(r.generated_tokens for r in runs)
    rows = turn_rows(runs, TrainConfig(task="agentic"))
    assert len(rows) == sum(len(r.turns) for r in runs)
    m.observe(groups)
    state = json_copy(m.state_dict())
    other = build(name, config, task="agentic")
    other.setup([18, 21, 29, 3], {})
    other.load_state_dict(state)
    assert json_copy(other.state_dict()) == state
    if name not in FRESH_ONLY:
        assert any(g.is_replay for g in groups)     # replays happen once the buffer has successes
