"""PAIR: the pair weights, the convex design (against a generic solver), the Horvitz-Thompson
advantages, the design-unbiasedness audit on a frozen population, and one step on the tiny
policy with the real engine (sequences and tokens through the meter).
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from components.data.prompting import encode_prompt
from components.data.synthetic import generate_problems
from components.engine.base import SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.methods.base import RolloutContext
from components.methods.pair import audit, design_objective, ht_advantages, pair_design, pair_weights
from components.methods.registry import build


def test_pair_weights_hand_computed():
    m = pair_weights(np.array([0.5, 1.0, 0.0]))
    # m_01 = .5*0 + 1*.5, m_02 = .5*1 + 0*.5, m_12 = 1*1 + 0*0
    assert np.allclose(m, [[0, 0.5, 0.5], [0.5, 0, 1.0], [0.5, 1.0, 0]])


def test_design_matches_a_generic_convex_solver():
    rng = np.random.default_rng(0)
    for _ in range(4):
        K = 6
        q, cost = rng.random((1, K)), rng.uniform(5, 50, (1, K))
        fixed = np.zeros((1, K), dtype=bool)
        fixed[0, 0] = True
        m = pair_weights(q)
        S = rng.uniform(0.2, 0.8) * cost[~fixed].sum()
        pi = pair_design(m, cost, fixed, S, 0.1)
        free = ~fixed[0]

        def obj(x):
            p = np.ones(K)
            p[free] = x
            return design_objective(m, p[None])

        ref = minimize(obj, np.full(free.sum(), 0.5), bounds=[(0.1, 1)] * free.sum(), method="SLSQP",
                       constraints=[{"type": "ineq", "fun": lambda x: S - (cost[0, free] * x).sum()}],
                       options={"ftol": 1e-14, "maxiter": 1000})
        assert pi[0, 0] == 1.0 and (cost * pi)[~fixed].sum() <= S * (1 + 1e-9)
        assert design_objective(m, pi) == pytest.approx(ref.fun, rel=1e-7)
        assert np.allclose(pi[0, free], ref.x, atol=1e-5)


def test_design_edges():
    m = pair_weights(np.array([[0.3, 0.6, 0.5]]))
    cost, fixed = np.full((1, 3), 10.0), np.zeros((1, 3), dtype=bool)
    assert np.all(pair_design(m, cost, fixed, 30.0) == 1.0)               # budget covers everything
    flat = pair_design(pair_weights(np.zeros((1, 3))), cost, fixed, 15.0, pi_min=0.2)
    assert np.all(flat >= 0.2)                                             # no predicted contrast: floor
    sym = pair_design(m * 0 + pair_weights(np.full((1, 3), 0.5)), cost, fixed, 15.0)
    assert np.allclose(sym, 0.5)                                           # symmetric: budget split evenly
    with pytest.raises(ValueError, match="pi_min"):
        pair_design(m, cost, fixed, 1.0, pi_min=0.1)


def test_ht_advantages_hand_computed():
    # every candidate completed (pi = 1): RLOO, r_i - mean of the others
    assert np.allclose(ht_advantages([1, 0, 0, 1], [1, 1, 1, 1], 4), [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # K = 4, completed {0, 1} with pi = (.5, .25): (1 - 0) / (.5 * .25) / 3 = 8/3
    assert np.allclose(ht_advantages([1, 0], [0.5, 0.25], 4), [8 / 3, -8 / 3])
    assert ht_advantages([1], [0.3], 4) == [0.0]


def frozen_population(rng, G=6, K=8, D=3):
    """Fixed rewards, per-candidate score-function vectors, predictions that track the rewards
    and costs that are larger for wrong candidates: the design then favours correct ones."""
    r = (rng.random((G, K)) < 0.4).astype(float)
    r[:, 0], r[:, 1] = 1.0, 0.0                                   # every group has contrast
    grads = rng.normal(size=(G, K, D))
    q = np.clip(0.25 + 0.5 * r + rng.normal(0, 0.05, (G, K)), 0.02, 0.98)
    cost = np.where(r > 0, 20.0, 60.0)
    pi = pair_design(pair_weights(q), cost, np.zeros((G, K), dtype=bool), 0.4 * cost.sum(), pi_min=0.1)
    return r, grads, pi


def test_design_unbiasedness_audit():
    """Frozen population: over repeated designs, the HT-weighted pair estimator's mean equals
    the complete-pair gradient target within Monte-Carlo error; the unweighted adaptive one
    (RLOO over the completed candidates only) does not."""
    rng = np.random.default_rng(7)
    r, grads, pi = frozen_population(rng)
    assert pi.min() < 0.5 and (pi[r > 0].mean() > pi[r == 0].mean())   # adaptive: it does select
    a = audit(r, grads, pi, 20_000, rng)
    z_ht = np.abs(a["ht_mean"] - a["target"]) / a["ht_se"]
    z_unw = np.abs(a["unweighted_mean"] - a["target"]) / a["unweighted_se"]
    assert z_ht.max() < 4.5, z_ht.max()                       # 18 coordinates, |z| of an unbiased mean
    assert np.median(z_unw) > 10, np.median(z_unw)


def test_audit_estimator_is_ht_advantages():
    """The audit's vectorised estimator is ht_advantages on the completed set, draw by draw."""
    rng = np.random.default_rng(3)
    r, grads, pi = frozen_population(rng, G=1)
    for _ in range(20):
        seed = int(rng.integers(1 << 30))
        a = audit(r, grads, pi, 1, np.random.default_rng(seed))
        inc = np.random.default_rng(seed).random((1, 8)) < pi[0]
        s = np.flatnonzero(inc[0])
        expected = np.asarray(ht_advantages(r[0, s], pi[0, s], 8)) @ grads[0, s] / 8 if len(s) else np.zeros(3)
        assert np.allclose(a["ht_mean"][0], expected)


# ---------------------------------------------------------------- on the tiny policy
def parity_reward(texts, golds):
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


def test_pair_step_meters_every_token_and_weights_completed_pairs(tok, model):
    probs = generate_problems(6, [3], seed=3)
    m = build("pair", {"K": 4, "prefix_tokens": 4, "suffix_budget_frac": 0.5, "pi_min": 0.2})
    m.setup(probs, {})
    eng = HFEngine(model, tok, meter=TokenMeter())
    ctx = RolloutContext(engine=eng, grade=parity_reward, encode_prompt=lambda p: encode_prompt(p, tok, "raw"),
                         sampling=SamplingParams(1.0, 1.0, 16, 0), step=0)
    groups = m.rollout(probs, ctx, np.random.default_rng(0))
    by = eng.meter.by_purpose()
    assert eng.meter.totals()["sequences"] == m.rollouts_per_step(6) == 24
    kept = sum(len(r) for g in groups for r in g.responses)
    assert by["train_rollout"]["generated_tokens"] == kept
    assert by["train_rollout"]["sequences"] == m.last_stats["completed"] == sum(g.n for g in groups)
    assert by.get("discarded", {}).get("sequences", 0) == 24 - m.last_stats["completed"]
    assert 0 < m.last_stats["continued"] < 24 - m.last_stats["finished_in_prefix"]
    scale = m.last_stats["completed"] / 24
    for g in groups:
        assert g.context_ids == tuple(encode_prompt(next(p for p in probs if p.uid == g.problem_uid), tok, "raw"))
        assert all(len(r) <= 16 for r in g.responses)
        expected = [a * scale for a in ht_advantages(g.rewards, g.meta["pair_pi"], 4)]
        assert np.allclose(m.sample_advantages(g), expected)
    m.observe(groups)
    assert m.cost is not None and np.any(m.w != 0)
