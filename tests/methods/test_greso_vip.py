"""GRESO (docs/methods.md §6) and VIP (section 2): hand-derived vectors, exact budgets,
brute-force allocation optima, determinism, state round trips and 2-step trainer runs."""
from __future__ import annotations

import copy
import itertools
import json

import numpy as np
import pytest
from coin_engine import CoinEngine, coin_grade
from tiny import tiny_test_policy

from components.data.schema import Problem
from components.engine.base import SamplingParams
from components.methods.base import RolloutContext
from components.methods.greso import skip_probability
from components.methods.registry import build
from components.methods.vip import (HashingEmbedder, MiniLMEmbedder, PoolGP, allocate, f_var,
                                    greedy_allocate, latent_observation, median_bandwidth,
                                    relaxed_allocation)


# ---------------------------------------------------------------------------- fakes
def probs(kinds):
    return [Problem(uid=f"q{i}", prompt=f"problem {i}: add {i} and {3 * i + 1}", answer=k) for i, k in enumerate(kinds)]


def ctx(engine, step=0, seed=0):
    return RolloutContext(engine=engine, grade=coin_grade, encode_prompt=lambda p: (1, 2, 3),
                          sampling=SamplingParams(seed=seed), step=step)


# ---------------------------------------------------------------------------- GRESO
@pytest.mark.parametrize("means,pe,ph,expected", [
    ([], 0.5, 0.5, 0.0),                        # no history: never skipped
    ([1, 1, 1], 0.5, 0.5, 0.875),               # 1 - 0.5^3
    ([0.5, 1, 1], 0.5, 0.5, 0.75),              # z_e = 2
    ([1, 1, 0.5], 0.5, 0.5, 0.0),               # latest is mixed
    ([0.98], 0.9, 0.5, 1 - 0.9),                # >= 0.98 is easy (inclusive)
    ([0.97], 0.5, 0.5, 0.0),
    ([1, 1, 1], 0.9, 0.5, 1 - 0.729),
    ([1] * 10, 0.5, 0.5, 0.99),                 # 0.5^10 < 0.01 floor
    ([0, 0, 0], 0.5, 0.5, 0.875),               # hard: 1 - 0.5^3
    ([0.5, 0, 0.1], 0.5, 0.7, 1 - 0.49),        # z_h = 2 (0.1 <= 0.11)
    ([0.11], 0.5, 0.3, 0.7),                    # <= 0.11 is hard (inclusive)
    ([0.12], 0.5, 0.5, 0.0),
    ([1, 1, 0], 0.5, 0.6, 0.4),                 # easy run broken: hard z_h = 1
    ([0, 0, 1], 0.2, 0.5, 0.8),                 # hard run broken: easy z_e = 1
    ([0] * 8, 0.5, 0.5, 0.99),
])
def test_skip_probability_hand_vectors(means, pe, ph, expected):
    trace = [(s, m) for s, m in enumerate(means)]
    assert skip_probability(trace, pe, ph) == pytest.approx(expected, abs=1e-12)
    assert skip_probability(means, pe, ph) == pytest.approx(expected, abs=1e-12)


def gr(uid, rewards):
    from components.methods.base import Group
    return Group(uid=uid, problem_uid=uid, answer="", context_ids=(1,), prompt_len=1,
                 responses=[(5,)] * len(rewards), texts=[""] * len(rewards), rewards=list(rewards))


def test_greso_exploration_adaptation():
    m = build("greso", {})
    m.epoch = 1
    batch = [gr("e0", [1] * 8), gr("h0", [0] * 8), gr("h1", [0] * 8)] + [gr(f"m{i}", [1, 0] * 4) for i in range(9)]
    m.observe(batch)                           # easy 1/12 >= 1/12, hard 2/12 >= 1/6: both down
    assert (m.p_easy, m.p_hard) == (0.49, 0.49)
    m.observe([gr("h0", [0] * 8)] + [gr(f"m{i}", [1, 0] * 4) for i in range(11)])   # 0 easy, 1/12 hard: up
    assert (m.p_easy, m.p_hard) == (0.5, 0.5)
    assert m.traces["h0"] == [[0, 0.0], [0, 0.0]] and m.skip_prob("h0") == pytest.approx(0.75)
    m.p_easy = 0.05
    m.observe([gr("e0", [1] * 8)])
    assert m.p_easy == 0.05                    # clamped at 0.05
    m.p_hard = 0.95
    m.observe([gr("m0", [1, 0])])
    assert m.p_hard == 0.95                    # clamped at 0.95
    first = build("greso", {})                 # epoch 0 (< adapt_from_epoch=1): no adaptation
    first.observe(batch)
    assert (first.p_easy, first.p_hard) == (0.5, 0.5)


def test_greso_replaces_skipped_prompts_and_keeps_the_budget():
    pool = probs(["1"] * 6 + ["mix"] * 10)
    m = build("greso", {"n": 4, "min_keep_prob": 0.0})
    m.setup(pool, {})
    for p in pool[:6]:
        m.traces[p.uid] = [[0, 1.0]] * 3
    m.p_easy = 0.0                             # traced easy prompts: skip probability exactly 1
    eng = CoinEngine()
    groups = m.rollout(pool[:4], ctx(eng, step=1), np.random.default_rng(3))
    assert len(groups) == 4 and all(g.n == 4 for g in groups)
    assert {g.problem_uid for g in groups} <= {p.uid for p in pool[6:]}       # all replaced by fresh prompts
    assert eng.meter.totals("train_rollout")["sequences"] == m.rollouts_per_step(4) == 16
    assert m.last_stats["drawn"] == 4 and m.last_stats["forced"] == 0
    assert m.last_stats["skipped"] == 4 + m.last_stats["examined"] - 4       # batch prompts + traced easy draws
    again = copy.deepcopy(m)
    same = again.rollout(pool[:4], ctx(CoinEngine(), step=1), np.random.default_rng(3))
    assert [g.problem_uid for g in same] == [g.problem_uid for g in groups]   # deterministic under seed


def test_greso_forces_skipped_prompts_when_draws_run_out():
    pool = probs(["1"] * 8)
    m = build("greso", {"n": 2, "min_keep_prob": 0.0, "max_draw_factor": 0.5})
    m.setup(pool, {})
    for p in pool:
        m.traces[p.uid] = [[0, 1.0]]
    m.p_easy = 0.0
    eng = CoinEngine()
    groups = m.rollout(pool[:4], ctx(eng, step=2), np.random.default_rng(0))
    assert len(groups) == 4 and eng.meter.totals()["sequences"] == 8
    assert m.last_stats["examined"] == 2 and m.last_stats["forced"] == 4 and m.last_stats["drawn"] == 0
    m.observe(groups)
    assert all(len(m.traces[g.problem_uid]) == 2 for g in groups)


def test_greso_state_dict_round_trip():
    m = build("greso", {})
    m.epoch, m.step = 1, 7
    m.observe([gr("a", [1] * 8), gr("b", [0, 1])])
    state = json.loads(json.dumps(m.state_dict()))
    r = build("greso", {})
    r.load_state_dict(state)
    assert r.state_dict() == m.state_dict() and r.skip_prob("a") == m.skip_prob("a")


# ---------------------------------------------------------------------------- VIP: GP
def test_vip_gp_tv4():
    X = np.array([[0, 0], [1, 0], [0, 1], [3, 3]], dtype=float)
    gp = PoolGP(sigma_n2=0.1, eps=0.05)
    gp.add(["a", "b", "c", "d"], X)
    assert median_bandwidth(X) == pytest.approx(2.509882, abs=1e-6)
    y = gp.update(["a", "b"], [8 / 8, 2 / 8])
    assert gp.h == pytest.approx(2.509882, abs=1e-6)
    np.testing.assert_allclose(y, [2.944439, -1.098612], atol=1e-5)
    np.testing.assert_allclose(gp.predict_latent(list("abcd")), [1.752214, 0.002402, 1.618515, -1.066664], atol=1e-5)
    np.testing.assert_allclose(gp.predict(list("abcd")), [0.852232, 0.500601, 0.834590, 0.256038], atol=1e-5)
    np.testing.assert_allclose(latent_observation([0.0, 0.5, 1.0]), [-2.944439, 0.0, 2.944439], atol=1e-6)


def test_hashing_embedder():
    e = HashingEmbedder()
    E = e.embed(["Compute 12 + 7 = ?", "Compute 12 + 7 = ?", "compute 12+8 = ?", "Ein völlig anderer Satz."])
    assert E.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0)
    assert np.array_equal(E[0], E[1]) and np.array_equal(E, HashingEmbedder().embed(
        ["Compute 12 + 7 = ?", "Compute 12 + 7 = ?", "compute 12+8 = ?", "Ein völlig anderer Satz."]))
    assert E[0] @ E[2] > E[0] @ E[3]
    assert e.embed([]).shape == (0, 384)


def test_minilm_embedder_loads_offline(monkeypatch):
    """VIP's all-MiniLM-L6-v2 from the shipped package files, with the hub switched off."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    E = MiniLMEmbedder().embed(["Compute 1+2-3.", "Compute 1+2-4.", "The cat sat on the mat."])
    assert E.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    assert E[0] @ E[1] > 0.8 > 0.2 > E[0] @ E[2]      # near-duplicates close, unrelated text far


# ---------------------------------------------------------------------------- VIP: allocation
def test_variance_factors_tv2():
    for p, n, dr, rloo in [(0.5, 4, 0.1875, 0.333333), (0.2, 8, 0.07, 0.091429)]:
        assert 4 * p * (1 - p) * f_var(n, "drgrpo") == pytest.approx(dr, abs=1e-6)
        assert 4 * p * (1 - p) * f_var(n, "rloo") == pytest.approx(rloo, abs=1e-6)


def test_allocation_hand_case():
    # RLOO: n - 1 proportional to sqrt(a) = 0.5 : 0.25, C - 2 = 6 -> (4, 2) + 1
    np.testing.assert_allclose(relaxed_allocation([0.25, 0.0625], 8, 2, 8), [5, 3], atol=1e-9)
    assert allocate([0.25, 0.0625], 8, 2, 8) == [5, 3] == greedy_allocate([0.25, 0.0625], 8, 2, 8)
    # Dr. GRPO interior KKT: a (n-2)/n^3 equal across prompts
    a = np.array([0.25, 0.16, 0.09])
    n = relaxed_allocation(a, 18, 3, 16, "drgrpo")
    assert n.sum() == pytest.approx(18) and np.ptp(a * (n - 2) / n ** 3) < 1e-9
    assert allocate([0.0, 0.0, 0.0], 9, 2, 8) == [3, 3, 3]         # all a = 0: uniform tie-break
    assert allocate([0.2, 0.0, 0.2], 6, 2, 8) == [2, 2, 2]         # C = L * k
    assert allocate([0.2, 0.1], 12, 2, 6) == [6, 6]                # C = U * k
    with pytest.raises(ValueError):
        allocate([0.2, 0.1], 13, 2, 6)
    with pytest.raises(ValueError):
        allocate([0.2, 0.1], 8, 2, 6, "drgrpo")                    # Dr. GRPO needs L >= 3


@pytest.mark.parametrize("base,L", [("rloo", 2), ("drgrpo", 3)])
def test_allocation_equals_brute_force_optimum(base, L):
    rng = np.random.default_rng(0 if base == "rloo" else 1)
    cases = 0
    while cases < 60:
        k = int(rng.integers(2, 5))
        U = int(rng.integers(L + 1, 10))
        if L * k > 20:
            continue
        C = int(rng.integers(L * k, min(U * k, 20) + 1))
        p = rng.random(k)
        a = p * (1 - p) * (rng.random(k) > 0.15)                 # some prompts with a = 0
        obj = lambda n: float(np.sum(a * f_var(np.asarray(n), base)))
        best = min(obj(n) for n in itertools.product(range(L, U + 1), repeat=k) if sum(n) == C)
        n1, n2 = allocate(a, C, L, U, base), greedy_allocate(a, C, L, U, base)
        for n in (n1, n2):
            assert sum(n) == C and all(L <= x <= U for x in n)
            assert obj(n) == pytest.approx(best, abs=1e-12)
        if (a > 0).all():
            assert n1 == n2                                       # generic a: the optimum is unique
        cases += 1


def test_allocation_large_batch_agrees_with_greedy():
    a = np.random.default_rng(5).random(512) * 0.25
    for base, L in (("rloo", 2), ("drgrpo", 3)):
        n = allocate(a, 8 * 512, L, 32, base)
        assert sum(n) == 8 * 512 and n == greedy_allocate(a, 8 * 512, L, 32, base)


# ---------------------------------------------------------------------------- VIP: method
@pytest.mark.parametrize("base", ["rloo", "drgrpo"])
def test_vip_rollout_budget_learning_and_determinism(base):
    pool = probs(["1", "1", "mix", "mix", "0", "mix"])
    m = build("vip", {"base": base})
    m.setup(pool, {})
    eng = CoinEngine()
    g0 = m.rollout(pool, ctx(eng, 0), np.random.default_rng(0))
    assert [g.n for g in g0] == [8] * 6                          # prior p = 0.5 everywhere: uniform
    m.observe(g0)
    twin = copy.deepcopy(m)
    g1 = m.rollout(pool, ctx(eng, 1), np.random.default_rng(1))
    ns = [g.n for g in g1]
    assert sum(ns) == 48 == m.rollouts_per_step(6)
    assert eng.meter.totals("train_rollout")["sequences"] == 2 * 48
    assert ns[2] > ns[0] and ns[2] > ns[4]                       # mixed prompts get more than solved/failed
    assert g1[0].meta["vip_p"] > 0.5 > g1[4].meta["vip_p"]
    g1b = twin.rollout(pool, ctx(CoinEngine(), 1), np.random.default_rng(1))
    assert [g.n for g in g1b] == ns and [g.rewards for g in g1b] == [g.rewards for g in g1]


def test_vip_state_dict_round_trip():
    pool = probs(["1", "mix", "0", "mix"])
    m = build("vip", {})
    m.setup(pool, {})
    m.observe(m.rollout(pool[:3], ctx(CoinEngine()), np.random.default_rng(0)))
    state = json.loads(json.dumps(m.state_dict()))
    assert set(state["weights"]) == {"q0", "q1", "q2"} and len(state["embeddings"]["q0"]) == 384
    r = build("vip", {})
    r.setup(pool, {})
    r.load_state_dict(state)
    assert r.state_dict() == m.state_dict()
    assert np.array_equal(r.predict(pool), m.predict(pool))
    bare = build("vip", {})                                       # no setup: embeddings come from the state
    bare.load_state_dict(state)
    np.testing.assert_allclose(bare.gp.predict(["q0", "q1", "q2"]), m.predict(pool[:3]), atol=1e-12)


# ---------------------------------------------------------------------------- trainer
def parity_reward(texts, golds):
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


@pytest.fixture(scope="module")
def tiny():
    from components.data.synthetic import generate_problems
    from components.policy.tokenizer import build_tokenizer
    tok = build_tokenizer()
    model = tiny_test_policy(tok)
    return model, tok, generate_problems(12, [3], seed=1)


@pytest.mark.parametrize("method,mcfg,adv,reward,pool", [
    ("vip", {}, "rloo", parity_reward, 12),
    ("vip", {"base": "drgrpo", "budget_per_prompt": 6}, "drgrpo", parity_reward, 12),
    ("greso", {}, "grpo", parity_reward, 12),
    # every answer right, a pool of one batch: step 1 (epoch 1) skips easy prompts and must force them back
    ("greso", {"adapt_from_epoch": 0, "p_easy_init": 0.06}, "grpo", lambda t, g: [(1.0, "rule")] * len(t), 4),
])
def test_embedded_trainer_two_steps(tiny, tmp_path, method, mcfg, adv, reward, pool):
    from components.stages.base import NullTracker
    from components.trainer.train_config import TrainConfig
    from components.trainer.embedded import EmbeddedTrainer
    model, tok, problems = tiny
    problems = problems[:pool]
    cfg = TrainConfig(method=method, method_config=mcfg, steps=2, batch_prompts=4, max_new_tokens=16,
                      val_size=2, val_samples=1, adv_estimator=adv)
    tr = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, reward, NullTracker())
    tr.fit(problems, problems[:2], {"expert_traces": {}, "p0": {}}, tmp_path)
    rows = [h for h in tr.history if "rollouts" in h]
    assert len(rows) == 2 and all(r["rollouts"] == tr.method.rollouts_per_step(4) for r in rows)
    assert tr.meter.totals("train_rollout")["sequences"] == 2 * tr.method.rollouts_per_step(4)
    json.dumps(tr.method.state_dict())
    if pool == 4:                                                 # step 1 is epoch 1: every prompt easy
        assert rows[1]["method/forced"] > 0 and rows[1]["method/drawn"] == 0   # nothing left to draw
        assert tr.method.p_easy == 0.05 and tr.method.p_hard == 0.52
