"""Composed allocators: VSR's replayed states as allocation units inside VIGOR's rounds and
inside VIP's budget. The tiny policy with the real engine; a rule reward; expert traces seed
VSR's buffer so states exist at step 0.
"""
from __future__ import annotations

import numpy as np
import pytest

from components.data.prompting import encode_prompt
from components.data.synthetic import generate_problems
from components.engine.base import SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.methods.base import RolloutContext
from components.methods.registry import build
from components.methods.vip import allocate


def parity_reward(texts, golds):
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


@pytest.fixture(scope="module")
def problems():
    return generate_problems(8, [3], seed=4)


def resources(problems, tok):
    return {"tokenizer": tok, "expert_traces": {p.uid: p.traces[0] for p in problems},
            "p0": {p.uid: 0.25 for p in problems}}


def ctx_for(model, tok):
    eng = HFEngine(model, tok, meter=TokenMeter())
    return RolloutContext(engine=eng, grade=parity_reward, encode_prompt=lambda p: encode_prompt(p, tok, "raw"),
                          sampling=SamplingParams(1.0, 1.0, 8, 0), step=0)


def _check_states(m, groups):
    states = [g for g in groups if g.is_replay]
    assert len(states) == 2 and len(groups) == 4 and all(g.meta["unit"] == "state" for g in states)
    for g in states:                            # p_hat(s) = (1 - alpha) p0 + alpha
        traj = m.vsr.buffer[g.problem_uid]
        alpha = g.prefix_len / len(traj.response_ids)
        assert g.meta["p_hat_state"] == pytest.approx(0.75 * alpha + 0.25)
        assert g.context_ids[g.prompt_len:] == tuple(traj.response_ids[:g.prefix_len])


def test_vigor_vsr_rounds_over_prompts_and_states(problems, tok, model):
    m = build("vigor_vsr", {"vsr": {"rho": 0.5}})
    m.setup(problems, resources(problems, tok))
    ctx = ctx_for(model, tok)
    groups = m.rollout(problems[:4], ctx, np.random.default_rng(0))
    _check_states(m, groups)
    # VIGOR's schedule for 4 units (ceil): 4x2 + 2x4 + 1x8 + 1x16 = 40, prompts and states alike
    assert m.rollouts_per_step(4) == 40 == ctx.engine.meter.totals()["sequences"] == sum(g.n for g in groups)
    assert sorted(g.meta["rounds"] for g in groups) == [1, 1, 2, 4]
    assert ctx.engine.meter.by_purpose()["train_rollout"]["generated_tokens"] == \
        sum(len(r) for g in groups for r in g.responses)
    m.observe(groups)                           # successes of every unit reach VSR's buffer and p0
    assert all(m.vsr.p0[g.problem_uid] == pytest.approx(np.mean(g.rewards)) for g in groups if not g.is_replay)


def test_vip_vsr_shares_one_budget_between_prompts_and_states(problems, tok, model):
    m = build("vip_vsr", {"vsr": {"rho": 0.5}, "vip": {"embedder": "hashing"}})
    m.setup(problems, resources(problems, tok))
    ctx = ctx_for(model, tok)
    groups = m.rollout(problems[:4], ctx, np.random.default_rng(0))
    _check_states(m, groups)
    p = np.array([g.meta["vip_p"] for g in groups])
    assert [g.meta["vip_n"] for g in groups] == allocate(p * (1 - p), 32, 2, 32, "rloo") == [g.n for g in groups]
    assert ctx.engine.meter.totals()["sequences"] == 32 == m.rollouts_per_step(4)
    for g in groups:
        if g.is_replay:
            assert g.meta["vip_p"] == g.meta["p_hat_state"]
    seen_before = float(m.vip.gp.seen.sum())
    m.observe(groups)                           # only the fresh prompts update VIP's GP
    assert float(m.vip.gp.seen.sum()) - seen_before == 2
