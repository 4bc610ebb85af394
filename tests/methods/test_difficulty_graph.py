"""Graph difficulty estimator: hand-computed mean-field updates, graph construction,
cold-start propagation, decay, state round trip, and the difficulty switch of VIP, VIGOR, GRESO."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from coin_engine import CoinEngine, coin_grade

from components.data.schema import Problem
from components.methods.difficulty_graph import (GraphDifficulty, GraphDifficultyConfig, build_graph,
                                                 mean_field_phi, mean_field_theta, reasoning_signature,
                                                 state_prior)
from scipy import sparse


def test_theta_update_hand():
    phi = np.array([[1.0, 0.0], [0.5, 0.5]])
    a, b = np.array([0.5, 1.5]), np.array([1.5, 0.5])
    alpha, beta = mean_field_theta(phi, np.array([3.0, 1.0]), np.array([1.0, 3.0]), a, b)
    assert alpha.tolist() == [4.0, 2.0] and beta.tolist() == [4.0, 2.0]


def test_phi_update_hand():
    W = sparse.csr_matrix(np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    phi = np.array([[0.5, 0.5], [1.0, 0.0], [0.5, 0.5]])
    zero = np.zeros(3)
    log_pi = np.log([0.5, 0.5])
    # no counts, symmetric theta: only the Potts field of neighbour 1 (state 0, weight 1)
    out = mean_field_phi(np.array([0, 2]), phi, W, zero, zero, np.array([2.0, 2.0]), np.array([2.0, 2.0]), 1.0, log_pi)
    e = math.e
    assert out[0] == pytest.approx([e / (e + 1), 1 / (e + 1)], abs=1e-12)
    assert out[1] == pytest.approx([0.5, 0.5], abs=1e-12)              # isolated node: the prior
    # counts only (J = 0): s = 2, f = 0; E[log theta] = psi(a) - psi(a+b) = [-(1 + 1/2 + 1/3), -1/3]
    s = np.array([0.0, 0.0, 2.0])
    out = mean_field_phi(np.array([2]), phi, W, s, zero, np.array([1.0, 3.0]), np.array([3.0, 1.0]), 0.0, log_pi)
    assert out[0, 1] == pytest.approx(1 / (1 + math.exp(-3.0)), abs=1e-12)


def test_build_graph_knn_hand():
    E = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]])
    W = build_graph(E, np.zeros((4, 1)), k=1, rho=0.0).toarray()
    want = np.zeros((4, 4))
    want[0, 1] = want[1, 0] = 0.8      # 0 <-> 1 mutual nearest
    want[1, 2] = want[2, 1] = 0.6      # 2's nearest is 1; symmetrised
    # 3's nearest (node 2) has similarity 0: no edge
    assert np.allclose(W, want)


def test_build_graph_reasoning_term():
    E = np.tile([[1.0, 0.0]], (3, 1))          # semantically identical
    R = np.array([[0.0], [0.0], [3.0]])
    W = build_graph(E, R, k=1, rho=1.0).toarray()
    # median pairwise distance of R = 3 -> h = 3; node 0 and 1 identical (1.0), node 2 at exp(-1/2)
    assert W[0, 1] == pytest.approx(1.0) and W[2, 0] == pytest.approx(math.exp(-0.5))


def test_reasoning_signature_hand():
    sig = reasoning_signature("Compute 54+70.")
    want = np.zeros(len(sig))
    want[1] = math.log(2)          # one '+' (index 0 = steps: none)
    want[-2] = math.log(3)         # two numbers
    want[-1] = math.log1p(0.2)     # two words / 10
    assert np.allclose(sig, want)


def _pool():
    """Two clusters far apart: A = q0..q4 around e1, B = q5..q9 around e2."""
    rng = np.random.default_rng(0)
    E = np.vstack([np.array([1.0, 0, 0]) + 0.05 * rng.standard_normal((5, 3)),
                   np.array([0, 1.0, 0]) + 0.05 * rng.standard_normal((5, 3))])
    probs = [Problem(uid=f"q{i}", prompt=f"p{i}", answer="1") for i in range(10)]
    return probs, E


def test_cold_start_prior_and_propagation():
    probs, E = _pool()
    est = GraphDifficulty(GraphDifficultyConfig(k_neighbors=3, reasoning_weight=0.0, coupling=2.0))
    est.fit_pool(probs, E)
    assert est.predict([p.uid for p in probs]) == pytest.approx([0.5] * 10, abs=1e-12)
    assert est.evidence(["q4"]).tolist() == [0.0]
    est.observe(["q0", "q1"], [8, 8], [8, 8], step=0)
    p = est.predict([p.uid for p in probs])
    assert p[0] > 0.8 and p[1] > 0.8
    # an unseen cluster-A prompt inherits the successes; cluster B (no edge to A) keeps the
    # prior mixture of the (moved) state means, the same for each of its prompts
    assert p[3] > p[7] + 0.2 and np.ptp(p[5:]) < 1e-12
    assert est.evidence(["q4"])[0] > 0


def test_decay_and_bad_input():
    probs, E = _pool()
    est = GraphDifficulty(GraphDifficultyConfig(k_neighbors=3, reasoning_weight=0.0, decay=0.9))
    est.fit_pool(probs, E)
    est.observe(["q0"], [6], [8], step=0)
    est.observe(["q5"], [0], [4], step=2)
    assert est.s[0] == pytest.approx(6 * 0.81) and est.f[0] == pytest.approx(2 * 0.81)
    assert est.f[5] == 4
    with pytest.raises(ValueError, match="successes <= trials"):
        est.observe(["q1"], [3], [2], step=2)
    with pytest.raises(ValueError, match="before the last"):
        est.observe(["q1"], [1], [2], step=1)
    with pytest.raises(KeyError, match="not in the pool"):
        est.predict(["nope"])


def test_state_round_trip_before_and_after_fit():
    probs, E = _pool()
    cfg = GraphDifficultyConfig(k_neighbors=3, reasoning_weight=0.0)
    est = GraphDifficulty(cfg)
    est.fit_pool(probs, E)
    est.observe(["q0", "q6"], [7, 1], [8, 8], step=3)
    state = json.loads(json.dumps(est.state_dict()))
    early = GraphDifficulty(cfg)
    early.load_state_dict(state)                       # before the pool is known
    assert json.loads(json.dumps(early.state_dict())) == state
    early.fit_pool(probs, E)
    late = GraphDifficulty(cfg)
    late.fit_pool(probs, E)
    late.load_state_dict(state)
    uids = [p.uid for p in probs]
    assert np.array_equal(early.predict(uids), est.predict(uids))
    assert np.array_equal(late.predict(uids), est.predict(uids))


def test_state_prior_means():
    a, b = state_prior(5, 2.0)
    assert (a / (a + b)).tolist() == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.9])


# ---------------------------------------------------------------------------- the switch
from components.methods.difficulty_graph import graph_skip_probability, posterior_variance  # noqa: E402


@pytest.mark.parametrize("p,ev,n,pe,ph,want", [
    (0.9, 3.0, 2, 0.5, 0.5, 0.81 * 0.5 + 0.01 * 0.5),
    (0.9, 0.0, 2, 0.5, 0.5, 0.0),                 # nothing informs the prediction: never skipped
    (1.0, 1.0, 8, 0.0, 0.5, 0.99),                # capped at 1 - min_keep_prob
    (0.5, 1.0, 1, 0.8, 0.6, 0.5 * 0.2 + 0.5 * 0.4),
])
def test_graph_skip_probability_hand(p, ev, n, pe, ph, want):
    assert graph_skip_probability(p, ev, n, pe, ph) == pytest.approx(want, abs=1e-12)


def test_posterior_variance_hand():
    assert posterior_variance(0.5, [1, 1], 2.0) == pytest.approx(0.75 * 0.25)
    assert posterior_variance(0.5, [1, 1], None) == pytest.approx(0.25)
    assert posterior_variance(0.2, [], 4.0) == pytest.approx(0.16)


@pytest.mark.parametrize("name,extra", [("vip", {"embedder": "hashing"}), ("vigor", {}), ("greso", {})])
def test_methods_use_the_graph(name, extra):
    from components.engine.base import SamplingParams
    from components.methods.base import RolloutContext
    from components.methods.registry import build

    kinds = ["1", "0", "mix"] * 6
    pool = [Problem(uid=f"q{i}", prompt=f"Compute {i}+{2 * i + 1}.", answer=k) for i, k in enumerate(kinds)]
    cfg = {**extra, "difficulty": "graph", "graph": {"embedder": "hashing", "k_neighbors": 3}}
    m = build(name, cfg)
    m.setup(pool, {})
    assert m.graph is not None and len(m.graph.row) == len(pool)
    eng = CoinEngine()
    for step in range(2):
        ctx = RolloutContext(engine=eng, grade=coin_grade, encode_prompt=lambda p: (1, 2, 3),
                             sampling=SamplingParams(seed=0), step=step)
        groups = m.rollout(pool[:8], ctx, np.random.default_rng(step))
        assert sum(g.n for g in groups) == m.rollouts_per_step(8)
        m.observe(groups)
    assert m.graph.step == 1 and (m.graph.s + m.graph.f).sum() > 0
    state = json.loads(json.dumps(m.state_dict()))
    fresh = build(name, cfg)
    fresh.setup(pool, {})
    fresh.load_state_dict(state)
    uids = [p.uid for p in pool]
    assert np.array_equal(fresh.graph.predict(uids), m.graph.predict(uids))
    assert json.loads(json.dumps(fresh.state_dict())) == state


def test_prediction_error_hand():
    probs, E = _pool()
    est = GraphDifficulty(GraphDifficultyConfig(k_neighbors=3, reasoning_weight=0.0, decay=0.9))
    est.fit_pool(probs, E)
    est.observe(["q0"], [8], [8], step=0)
    pred = est.predict(["q0", "q5"])
    out = est.prediction_error(["q0", "q5"], np.array([1.0, 0.0]), step=1)
    own_q0 = (0.9 * 8 + 1) / (0.9 * 8 + 2)            # decayed counts, Beta(1, 1)
    assert out["own_mae"] == pytest.approx(((1 - own_q0) + 0.5) / 2)
    assert out["own_mae_warm"] == pytest.approx(1 - own_q0) and out["own_mae_cold"] == pytest.approx(0.5)
    assert out["graph_mae"] == pytest.approx(((1 - pred[0]) + pred[1]) / 2)
    assert out["graph_mae_cold"] == pytest.approx(pred[1]) and out["graph_cold_frac"] == 0.5
    assert out["observed_pass_rate"] == 0.5 and out["graph_pred_mean"] == pytest.approx(pred.mean())


@pytest.mark.parametrize("name", ["vip_graph", "vigor_graph", "greso_graph"])
def test_presets_log_the_prediction_error(name):
    from components.engine.base import SamplingParams
    from components.methods.base import RolloutContext
    from components.methods.registry import build

    kinds = ["1", "0", "mix"] * 6
    pool = [Problem(uid=f"q{i}", prompt=f"Compute {i}+{2 * i + 1}.", answer=k) for i, k in enumerate(kinds)]
    extra = {"embedder": "hashing"} if name == "vip_graph" else {}
    m = build(name, {**extra, "graph": {"embedder": "hashing", "k_neighbors": 3}})
    m.setup(pool, {})
    ctx = RolloutContext(engine=CoinEngine(), grade=coin_grade, encode_prompt=lambda p: (1, 2, 3),
                         sampling=SamplingParams(seed=0), step=0)
    groups = m.rollout(pool[:8], ctx, np.random.default_rng(0))
    m.observe(groups)
    rates = {}
    for g in groups:
        rates.setdefault(g.problem_uid, []).extend(r > 0.5 for r in g.rewards)
    # step 0: nothing observed yet, so every prediction is the prior mixture 0.5 and every prompt is cold
    want = np.mean([abs(0.5 - np.mean(v)) for v in rates.values()])
    stats = m.step_stats()
    assert stats["graph_mae"] == pytest.approx(want) and stats["own_mae"] == pytest.approx(want)
    assert stats["graph_cold_frac"] == 1.0 and "graph_mae_warm" not in stats
