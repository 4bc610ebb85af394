"""Allocation baselines: DAPO, PODS, Reinforce-Ada-Est, VIGOR.

Pinned vectors from docs/methods.md (TV10, TV11) and hand-derived ones (allocation, Ada-EMA,
VIGOR speedup), then each method on a tiny random policy with a rule reward: budget
accounting through the token meter, group shapes, determinism, state round trip, and two
steps of the embedded trainer.
"""
from __future__ import annotations

import copy
import itertools
import json
import math

import numpy as np
import pytest

from components.data.prompting import encode_prompt
from components.data.synthetic import generate_problems
from components.engine.base import SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.methods.base import Group, RolloutContext
from components.methods.dapo import overlong_penalty
from components.methods.pods import max_variance_subset
from components.methods.registry import build
from components.methods.reinforce_ada import allocate
from components.methods.vigor import bernoulli_var, speedup
from components.stages.base import NullTracker
from components.trainer.train_config import TrainConfig
from components.trainer.embedded import EmbeddedTrainer


def parity_reward(texts, golds):
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


def half_reward(texts, golds):
    """Parity on prompts with an even answer, always 0 on odd ones: many zero-std groups."""
    return [(float(len(t) % 2 == 0) if int(g) % 2 == 0 else 0.0, "rule") for t, g in zip(texts, golds)]


def zero_reward(texts, golds):
    return [(0.0, "rule") for _ in texts]


# ---------------------------------------------------------------- pinned vectors
@pytest.mark.parametrize("L,expected", [(16000, 0.0), (18000, -0.394531), (20480, -1.0), (21000, -1.0)])
def test_overlong_penalty_tv10(L, expected):
    assert overlong_penalty(L, 20480, 4096, 1.0) == pytest.approx(expected, abs=1e-6)


def test_overlong_penalty_off_and_factor():
    assert overlong_penalty(30000, 20480, 0, 1.0) == 0.0
    assert overlong_penalty(18000, 20480, 4096, 0.5) == pytest.approx(-0.5 * 1616 / 4096)


def _brute_max_var(r, m):
    return max(np.var([r[i] for i in c]) for c in itertools.combinations(range(len(r)), m))


def test_pods_tv11_accepts_ties():
    rw = [0.1, 0.9, 0.5, 0.3, 0.8, 0.2]
    idx = max_variance_subset(rw, 3)
    assert len(idx) == 3 and len(set(idx)) == 3
    assert np.var([rw[i] for i in idx]) == pytest.approx(0.38 / 3, abs=1e-9)      # 0.126667
    assert np.var([rw[i] for i in idx]) == pytest.approx(_brute_max_var(rw, 3), abs=1e-12)
    assert idx in ([0, 1, 5], [0, 1, 4])
    b = [1, 0, 0, 1, 1, 0, 0, 0]
    kb = max_variance_subset(b, 4)
    assert sorted(b[i] for i in kb) == [0, 0, 1, 1] and np.var([b[i] for i in kb]) == 0.25


def test_pods_subset_matches_brute_force_on_random_inputs():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 9))
        m = int(rng.integers(1, n + 1))
        r = rng.integers(0, 4, size=n).astype(float) if rng.random() < 0.5 else rng.random(n)
        idx = max_variance_subset(r.tolist(), m)
        assert len(idx) == m and len(set(idx)) == m
        assert np.var(r[idx]) == pytest.approx(_brute_max_var(r.tolist(), m), abs=1e-12)


def test_allocate_hand_derived_tv6():
    # w = 1/sqrt(p): p = [1/16, 1/4, 1, 1] -> w = [4, 2, 1, 1]; total 32: 8c = 32, c = 4
    assert allocate([1 / 16, 1 / 4, 1, 1], 32, 4, 32) == [16, 8, 4, 4]
    # n_max = 12 clips the first: 12 + c(2 + 1 + 1) = 32 -> c = 5 -> [12, 10, 5, 5]
    assert allocate([1 / 16, 1 / 4, 1, 1], 32, 4, 12) == [12, 10, 5, 5]
    # w = [2, 1, 1], total 10: c = 2.5 -> [5, 2.5, 2.5]; one unit left, tie -> lowest index
    assert allocate([0.25, 1, 1], 10, 1, 32) == [5, 3, 2]
    # all equal -> uniform; lower bound binds for easy prompts
    assert allocate([0.5] * 4, 32, 4, 32) == [8] * 4
    assert allocate([1e-4, 1, 1, 1], 32, 4, 32) == [20, 4, 4, 4]
    with pytest.raises(ValueError):
        allocate([0.5, 0.5], 100, 4, 32)


def test_allocate_sum_and_bounds_random():
    rng = np.random.default_rng(1)
    for _ in range(300):
        B = int(rng.integers(1, 20))
        lo, hi = int(rng.integers(1, 6)), int(rng.integers(6, 40))
        total = int(rng.integers(B * lo, B * hi + 1))
        p = rng.random(B) ** 3
        n = allocate(p.tolist(), total, lo, hi)
        assert sum(n) == total and all(lo <= k <= hi for k in n)
        order = np.argsort(p)             # a lower pass rate never gets fewer samples (up to rounding)
        assert all(n[order[i]] >= n[order[i + 1]] - 1 for i in range(B - 1))


def _grp(uid, rewards):
    return Group(uid=uid, problem_uid=uid, answer="0", context_ids=(1,), prompt_len=1,
                 responses=[(5,)] * len(rewards), texts=[""] * len(rewards), rewards=list(rewards))


def test_ada_ema_hand_derived():
    m = build("reinforce_ada_est", {"lam": 0.9, "prior_a": 0.5, "prior_b": 0.5})
    assert m.p_hat("x") == 0.5
    m.observe([_grp("x", [1, 1, 0, 0, 0, 0, 0, 0])])         # N_tot = 8, N_pos = 2
    assert m.p_hat("x") == pytest.approx(2.5 / 9)
    m.observe([_grp("x", [1, 1, 1, 1])])                      # 0.9*8+4 = 11.2, 0.9*2+4 = 5.8
    assert m.p_hat("x") == pytest.approx(6.3 / 12.2)
    assert m.p_hat("y") == 0.5


def test_vigor_speedup_hand_derived():
    # k = 2: gamma * alpha^(1/2) = 2 / sqrt(2) = sqrt(2); sum_{i<4} sqrt(2)^i = 3 + 3 sqrt(2); alpha*gamma = 1 -> 4
    eta, tau = speedup(2)
    assert eta == pytest.approx((3 + 3 * math.sqrt(2)) / 4) and eta == pytest.approx(1.810660, abs=1e-6)
    assert tau == pytest.approx(eta ** (1 / 3)) and tau == pytest.approx(1.218837, abs=1e-6)
    # k = 1: gamma = 2 -> 1 + 2 + 4 + 8 = 15 -> 15/4
    assert speedup(1)[0] == pytest.approx(3.75)
    # k = 4: 2 * 2^(-3/4) = 2^(1/4); geometric sum = (2 - 1) / (2^(1/4) - 1)
    assert speedup(4)[0] == pytest.approx(1 / (2 ** 0.25 - 1) / 4)
    assert speedup(1e9)[0] == pytest.approx(1.0, abs=1e-6)      # heavy tail gone: no gain
    # alpha*gamma != 1: k = 2, alpha = 0.25, gamma = 2, T = 2: (1 + 2*0.5) / (1 + 0.5)
    assert speedup(2, T=2, gamma=2, alpha=0.25)[0] == pytest.approx(2 / 1.5)


@pytest.mark.parametrize("B,rounding,sched,total", [
    (16, "ceil", [(16, 2), (8, 4), (4, 8), (2, 16)], 128),       # = 8 * 16, GRPO n=8's budget
    (8, "ceil", [(8, 2), (4, 4), (2, 8), (1, 16)], 64),
    (4, "ceil", [(4, 2), (2, 4), (1, 8), (1, 16)], 40),
    (4, "floor", [(4, 2), (2, 4), (1, 8)], 24),
    (6, "ceil", [(6, 2), (3, 4), (2, 8), (1, 16)], 56),
])
def test_vigor_schedule(B, rounding, sched, total):
    v = build("vigor", {"rounding": rounding})
    assert v.schedule(B) == sched and v.rollouts_per_step(B) == total


# ---------------------------------------------------------------- with a tiny policy
@pytest.fixture(scope="module")
def problems():
    return generate_problems(12, [3], seed=1)


class CountingEngine(HFEngine):
    """Counts every generated token and sequence independently of the meter."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.gen_tokens = self.gen_seqs = 0

    def generate(self, requests, params, purpose="train_rollout"):
        out = super().generate(requests, params, purpose)
        self.gen_tokens += sum(len(c.token_ids) for cs in out for c in cs)
        self.gen_seqs += sum(len(cs) for cs in out)
        return out


def make_ctx(model, tok, grade, step=0, seed=0, max_new=16):
    eng = CountingEngine(model, tok, meter=TokenMeter())
    return RolloutContext(engine=eng, grade=grade, encode_prompt=lambda p: encode_prompt(p, tok, "raw"),
                          sampling=SamplingParams(1.0, 1.0, max_new, seed), step=step)


CASES = {
    "dapo": ({"n": 4, "max_num_gen_batches": 4, "gen_batch_multiplier": 1.0}, half_reward),   # refills
    "pods": ({"n": 8, "m": 4}, parity_reward),
    "reinforce_ada_est": ({"n_mean": 4, "n_min": 2, "n_max": 8}, parity_reward),
    "vigor": ({}, parity_reward),
}


def new_method(name, problems, tok):
    m = build(name, CASES[name][0])
    m.setup(problems, {"expert_traces": {}, "p0": {}, "tokenizer": tok})
    return m


def run_step(m, model, tok, batch, step, grade, rng_seed=0):
    ctx = make_ctx(model, tok, grade, step=step)
    with ctx.engine.meter.tagged(step=step):
        groups = m.rollout(batch, ctx, np.random.default_rng([rng_seed, step]))
    return groups, ctx


def promised(m, name, B):
    return int(m.last_stats["rollouts"]) if name == "dapo" else m.rollouts_per_step(B)


def summary(groups):
    return [(g.uid, g.responses, g.rewards, g.texts, g.meta.get("adv_weight")) for g in groups]


@pytest.mark.parametrize("name", list(CASES))
def test_budget_accounting_and_group_shapes(name, model, tok, problems):
    m, grade, B = new_method(name, problems, tok), CASES[name][1], 4
    for step in range(2):                         # step 1 sees the state observe() left (Ada-EMA)
        groups, ctx = run_step(m, model, tok, problems[4 * step: 4 * step + B], step, grade)
        m.observe(groups)
        eng, meter = ctx.engine, ctx.engine.meter
        assert eng.gen_seqs == promised(m, name, B)
        if name != "dapo":
            assert eng.gen_seqs == m.rollouts_per_step(B)
        else:
            assert eng.gen_seqs >= m.rollouts_per_step(B)
        train, disc = meter.totals("train_rollout"), meter.totals("discarded")
        assert set(meter.by_purpose()) <= {"train_rollout", "discarded"}
        assert train["generated_tokens"] + disc["generated_tokens"] == eng.gen_tokens
        assert train["sequences"] + disc["sequences"] == eng.gen_seqs
        assert train["generated_tokens"] == sum(len(r) for g in groups for r in g.responses)
        assert train["sequences"] == sum(g.n for g in groups)
        assert meter.totals(step=step)["generated_tokens"] == eng.gen_tokens
        for g in groups:
            assert g.n > 0 and len(g.rewards) == len(g.texts) == len(g.reasons) == len(g.finish_reasons) == g.n
        assert len({g.uid for g in groups}) == len(groups)
        if name == "pods":
            assert disc["sequences"] == B * (8 - 4) and all(g.n == 4 for g in groups)
        if name == "vigor":
            assert sorted(g.n for g in groups) == [2, 2, 6, 30]
        if name == "reinforce_ada_est":
            assert sum(g.n for g in groups) == 16 and all(2 <= g.n <= 8 for g in groups)
            assert all(g.meta["adv_weight"] == pytest.approx(1 / math.sqrt(np.mean(g.rewards) + 1e-6))
                       for g in groups)
        if name == "dapo":
            assert len(groups) <= B and all(len(set(g.rewards)) > 1 for g in groups)
            assert m.last_stats["gen_rounds"] > 1 and disc["sequences"] > 0    # refill path exercised


@pytest.mark.parametrize("name", list(CASES))
def test_deterministic_and_state_round_trip(name, model, tok, problems):
    grade = CASES[name][1]
    a, b = new_method(name, problems, tok), new_method(name, problems, tok)
    ga, _ = run_step(a, model, tok, problems[:4], 0, grade)
    gb, _ = run_step(b, model, tok, problems[:4], 0, grade)
    assert summary(ga) == summary(gb)
    a.observe(ga)
    state = json.loads(json.dumps(a.state_dict()))            # checkpoints store it as JSON
    c = new_method(name, problems, tok)
    c.load_state_dict(state)
    next_a = summary(run_step(a, model, tok, problems[:4], 1, grade)[0])
    assert next_a == summary(run_step(c, model, tok, problems[:4], 1, grade)[0])
    if name == "reinforce_ada_est":                           # the state matters: a fresh one differs
        assert next_a != summary(run_step(new_method(name, problems, tok), model, tok, problems[:4], 1, grade)[0])


def test_reinforce_ada_allocates_more_to_hard_prompts(model, tok, problems):
    m = new_method("reinforce_ada_est", problems, tok)
    m.observe([_grp(problems[0].uid, [0] * 8), _grp(problems[1].uid, [1] * 8)])
    groups, _ = run_step(m, model, tok, problems[:4], 0, parity_reward)
    n = {g.problem_uid: g.n for g in groups}
    assert n[problems[0].uid] > n[problems[2].uid] > n[problems[1].uid]
    r = build("reinforce_ada_est", {**CASES["reinforce_ada_est"][0], "weight_mode": "rewards"})
    g2, _ = run_step(r, model, tok, problems[:4], 0, parity_reward)
    for g in g2:
        assert g.rewards == pytest.approx([x * g.meta["reward_weight"] for x in g.meta["raw_rewards"]])


def test_vigor_expands_the_highest_variance_prompts(model, tok, problems):
    v = new_method("vigor", problems, tok)
    groups, _ = run_step(v, model, tok, problems[:8], 0, parity_reward)
    for t in range(1, 4):
        prev = [g for g in groups if g.meta["rounds"] >= t]
        var = {g.uid: bernoulli_var([r for r, k in zip(g.rewards, g.meta["round_of_sample"]) if k < t])
               for g in prev}
        chosen = {g.uid for g in prev if g.meta["rounds"] > t}
        assert len(chosen) == 8 >> t
        rest = set(var) - chosen
        if rest:
            assert min(var[u] for u in chosen) >= max(var[u] for u in rest)
    assert sum(g.n for g in groups) == 64 == v.rollouts_per_step(8)


def test_dapo_refills_discards_and_shapes(model, tok, problems):
    m = build("dapo", {"n": 4, "max_num_gen_batches": 3, "gen_batch_multiplier": 1.0})
    m.setup(problems, {})
    groups, ctx = run_step(m, model, tok, problems[:4], 0, zero_reward)
    assert groups == [] and m.last_stats["gen_rounds"] == 3
    assert ctx.engine.meter.totals("train_rollout")["generated_tokens"] == 0
    assert ctx.engine.meter.totals("discarded")["sequences"] == 3 * 4 * 4 == ctx.engine.gen_seqs
    strict = build("dapo", {"n": 4, "max_num_gen_batches": 2, "on_shortfall": "raise", "gen_batch_multiplier": 1.0})
    strict.setup(problems, {})
    with pytest.raises(RuntimeError):
        run_step(strict, model, tok, problems[:4], 0, zero_reward)
    shaped = build("dapo", {"n": 4, "overlong_buffer_len": 8, "max_response_len": 16})
    shaped.setup(problems, {})
    groups, _ = run_step(shaped, model, tok, problems[:4], 0, parity_reward)
    assert groups
    for g in groups:
        for r, acc, resp in zip(g.rewards, g.meta["acc"], g.responses):
            pen = min(-(len(resp) - 8) / 8, 0.0)
            assert r == pytest.approx(acc + pen)


@pytest.mark.parametrize("name", list(CASES))
def test_embedded_trainer_runs_two_steps(name, model, tok, problems, tmp_path):
    cfg = TrainConfig(method=name, method_config=CASES[name][0], steps=2, batch_prompts=4, max_new_tokens=16,
                      val_size=2, val_samples=1)
    tr = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, CASES[name][1], NullTracker())
    out = tr.fit(problems, problems[:2], {"expert_traces": {}, "p0": {}}, tmp_path)
    rows = [h for h in tr.history if "train/loss" in h]
    assert len(rows) == 2 and out["steps"] == 2
    if name != "dapo":
        assert all(h["rollouts"] == tr.method.rollouts_per_step(4) for h in rows)
    assert all(math.isfinite(h["train/loss"]) for h in rows)


def test_trainer_sees_the_reinforce_ada_weight(model, tok, problems):
    from components.methods.base import advantage_terms
    m = new_method("reinforce_ada_est", problems, tok)
    groups, _ = run_step(m, model, tok, problems[:4], 0, parity_reward)
    fixed, weight = advantage_terms(m, groups)
    want = [1 / math.sqrt(np.mean(g.rewards) + 1e-6) for g in groups for _ in g.responses]
    assert weight == pytest.approx(want) and len(set(weight)) > 1
    assert all(math.isnan(a) for a in fixed)           # Est weights the estimator, never replaces it
