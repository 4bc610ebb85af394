"""SARA (+ DPS) and CERO: hand-computed cases of their core rules, then each on the tiny
policy with the real engine (budget through the token meter, what is discarded, posteriors).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from components.data.prompting import encode_prompt
from components.data.synthetic import generate_problems
from components.engine.base import SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.methods.base import Group, RolloutContext
from components.methods.cero import (allocation, banded_allocation, conjugate, lambda_step, n_star, theta_step,
                                     utility)
from components.methods.posterior import BetaCounts, beta_moment, expected_bernoulli_variance
from components.methods.registry import build
from components.methods.sara import decide, dps_select, p_effective


# ---------------------------------------------------------------- posteriors
@pytest.mark.parametrize("a,b,expected", [(1, 1, 0.166667), (3, 1, 0.15), (1, 9, 0.081818), (5, 5, 0.227273)])
def test_expected_bernoulli_variance_tv14(a, b, expected):
    assert expected_bernoulli_variance(a, b) == pytest.approx(expected, abs=1e-6)


def test_beta_moment_and_decayed_counts():
    assert beta_moment(1, 1, 8, 0) == pytest.approx(1 / 9)          # E[p^8] under U(0, 1)
    assert beta_moment(1, 3, 0, 6) == pytest.approx(1 / 3)          # B(1, 9) / B(1, 3) = 3/9
    c = BetaCounts(1, 1, decay=0.5)
    c.add_rewards("x", [1, 0, 0, 0])
    c.add_rewards("x", [1, 1])                                       # 0.5*1 + 2, 0.5*3 + 0
    assert c.params("x") == (3.5, 2.5) and c.params("y") == (1.0, 1.0)


# ---------------------------------------------------------------- SARA's rule
def test_p_effective_hand_computed():
    assert p_effective(1, 1, 0, 0, 8) == pytest.approx(7 / 9)        # 1 - E[p^8] - E[(1-p)^8]
    assert p_effective(1, 1, 0, 2, 8) == pytest.approx(2 / 3)        # Beta(1,3): 1 - B(1,9)/B(1,3)
    assert p_effective(1, 1, 0, 4, 8) == pytest.approx(4 / 9)        # Beta(1,5): 1 - 5/9
    assert p_effective(1, 1, 2, 0, 8) == pytest.approx(2 / 3)        # symmetric: Beta(3,1), E[p^6] = 1/3
    assert p_effective(1, 1, 0, 2, 4) == pytest.approx(1 - 3 / 5)    # Beta(1,3), r = 2: B(1,5)/B(1,3)
    assert p_effective(3, 1, 1, 1, 8) == 1.0                         # mixed already
    assert p_effective(1, 1, 0, 8, 8) == 0.0                         # complete and saturated
    # history moves the prior: after 0/8 decayed by .5 (Beta(1, 5)), a fresh group of 8
    assert p_effective(1, 5, 0, 0, 8) == pytest.approx(1 - 5 / 13 - float(beta_moment(1, 5, 8, 0)))


def test_decide_thresholds():
    assert decide(1.0, 0.9, 0.5) == "commit" and decide(0.9, 0.9, 0.5) == "commit"
    assert decide(0.5, 0.9, 0.5) == "abandon" and decide(4 / 9, 0.9, 0.5) == "abandon"
    assert decide(2 / 3, 0.9, 0.5) == "continue"


def test_dps_select_keeps_draws_nearest_target():
    sharp = [(1e5 * p, 1e5 * (1 - p)) for p in (0.05, 0.45, 0.9, 0.6, 0.2)]   # draws = means
    assert dps_select(sharp, 2, np.random.default_rng(0)) == [1, 3]
    assert dps_select(sharp, 9, np.random.default_rng(0)) == [0, 1, 2, 3, 4]


def test_sara_config_rejects_crossed_thresholds():
    with pytest.raises(ValueError, match="abandon"):
        build("sara", {"commit": 0.5, "abandon": 0.6})


# ---------------------------------------------------------------- CERO's rule
def test_cero_fenchel_identity_and_conjugate_gradient():
    v, k = 0.15, 8.0
    for N in (0.0, 3.0, 8.0, 20.0):
        # U(N) = min_theta theta N - U*(theta) over (0, v]
        res = minimize_scalar(lambda t: t * N - conjugate(t, v, k), bounds=(1e-9, v), method="bounded",
                              options={"xatol": 1e-12})
        assert res.fun == pytest.approx(float(utility(N, v, k)), abs=1e-7)
        theta = v * math.exp(-N / k)                                  # U'(N)
        assert float(n_star(theta, v, k)) == pytest.approx(N)


def test_cero_allocation_hand_computed():
    v0 = 1 / 6
    lam0 = v0 * math.exp(-1.0)                                      # n_mean = kappa = 8
    assert allocation([v0], lam0, 8.0, 2, 32) == [8]                 # a fresh prompt gets n_mean
    assert allocation([lam0 * math.exp(0.5)], lam0, 8.0, 2, 32) == [4]
    assert allocation([lam0 * 0.5, lam0 * math.exp(10)], lam0, 8.0, 2, 32) == [2, 32]   # clipped
    # theta step: theta = v, N = 8: grad = 8 - kappa ln(v/v) = 8 -> theta exp(-.5 x 8/8)
    assert float(theta_step(v0, 8.0, v0, 8.0, 0.5, 1e-9)) == pytest.approx(v0 * math.exp(-0.5))
    assert float(theta_step(v0, 8.0, v0, 8.0, 1.0, 1e-9)) == pytest.approx(v0 * math.exp(-1.0))   # = U'(8)
    fixed = v0 * math.exp(-1.0)                                      # U'(8): a fixed point
    assert float(theta_step(fixed, 8.0, v0, 8.0, 0.5, 1e-9)) == pytest.approx(fixed)
    assert float(theta_step(v0, 0.0, v0 / 2, 8.0, 0.5, 1e-9)) == pytest.approx(v0 / 2)   # projected to <= v
    # lambda: spent 160 of an allowed 128 (rho 64) -> x exp(.5 x 32/64); projection at the bounds
    assert lambda_step(1.0, 160, 128, 64, 0.5, 1e-6, 10) == pytest.approx(math.exp(0.25))
    assert lambda_step(1.0, 0, 128, 64, 8.0, 0.01, 10) == 0.01


def test_cero_banded_allocation_moves_the_price_into_the_band():
    theta = [0.2, 0.1, 0.05, 0.01]
    n, lam = banded_allocation(theta, 0.001, 8.0, 2, 32)
    assert n == allocation(theta, 0.001, 8.0, 2, 32) == [32, 32, 31, 18] and lam == 0.001
    n2, lam2 = banded_allocation(theta, 0.001, 8.0, 2, 32, high=40)
    assert 38 <= sum(n2) <= 40 and lam2 > 0.001 and n2 == sorted(n2, reverse=True)
    n3, lam3 = banded_allocation(theta, 1.0, 8.0, 2, 32, low=30)      # all at n_min (8) -> lower the price
    assert 30 <= sum(n3) <= 33 and lam3 < 1.0
    with pytest.raises(RuntimeError, match="global budget"):
        banded_allocation(theta, 0.001, 8.0, 2, 32, high=7)


def _fake_groups(uids, ns, p, rng):
    return [Group(uid=u, problem_uid=u, answer="0", context_ids=(1,), prompt_len=1, responses=[(5,)] * n,
                  texts=[""] * n, rewards=[float(rng.random() < p[u]) for _ in range(n)]) for u, n in zip(uids, ns)]


def _cero_run(P, B, steps=60, gradient="path"):
    m = build("cero", {"n_mean": 8, "lambda_gradient": gradient})
    p = {f"q{i:03d}": 0.02 + 0.48 * i / (P - 1) for i in range(P)}
    uids, rng, spends, per = sorted(p), np.random.default_rng(0), [], {u: 0 for u in p}
    for step in range(steps):
        batch = [uids[(B * step + j) % P] for j in range(B)]
        ns = m.plan(batch)
        m.observe(_fake_groups(batch, ns, p, rng))
        spends.append(sum(ns))
        for u, n in zip(batch, ns):
            per[u] += n
    return m, spends, [per[u] for u in uids]


@pytest.mark.parametrize("P,B", [(24, 8), (100, 16)])
def test_cero_keeps_the_global_budget_and_favours_uncertain_prompts(P, B):
    """P prompts (pass rates .02 ... .5) revisited every epoch for 60 steps: the dual updates
    keep the run's spend at n_mean x B per step while more goes to prompts near p = .5."""
    m, spends, per = _cero_run(P, B)
    rho = 8 * B
    assert spends[0] == rho and abs(np.mean(spends) / rho - 1) < 0.03, np.mean(spends)
    assert all(0.75 * rho <= s <= 1.25 * rho for s in spends)
    k = P // 4
    assert sum(per[-k:]) > 1.1 * sum(per[:k]), (sum(per[:k]), sum(per[-k:]))
    assert m.spent == sum(spends) and m.t == 60


def test_cero_per_step_gradient_under_spends():
    """Why the budget gradient is the path's violation: with one step's (spend - rho) the
    price lags the geometrically falling marginal utilities and the run spends much less."""
    _, spends, _ = _cero_run(24, 8, gradient="step")
    assert np.mean(spends) < 0.9 * 64, np.mean(spends)


def test_cero_horizon_caps_the_total():
    m = build("cero", {"n_mean": 4, "n_min": 1, "n_max": 16, "horizon_steps": 3, "step_band": 1.0})
    rng = np.random.default_rng(1)
    for _ in range(3):
        batch = ["a", "b"]
        m.observe(_fake_groups(batch, m.plan(batch), {"a": 0.5, "b": 0.5}, rng))
    assert m.spent <= 4 * 2 * 3


# ---------------------------------------------------------------- on the tiny policy
def zero_reward(texts, golds):
    return [(0.0, "rule") for _ in texts]


def parity_reward(texts, golds):
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


def make_ctx(model, tok, grade, step=0, max_new=8):
    eng = HFEngine(model, tok, meter=TokenMeter())
    return RolloutContext(engine=eng, grade=grade, encode_prompt=lambda p: encode_prompt(p, tok, "raw"),
                          sampling=SamplingParams(1.0, 1.0, max_new, 0), step=step)


@pytest.fixture(scope="module")
def problems():
    return generate_problems(16, [3], seed=2)


def test_sara_abandons_saturated_prompts_and_refills_hand_traced(problems, tok, model):
    """All rewards 0, n = 8, B = 4 (budget 32): every prompt goes probe 2 (P_eff 2/3: continue),
    2 more (4/9: abandon). Refills: 2 prompts (16 free), then 1 (8), then a target-4 prompt
    (P_eff after 2 zeros = 1 - 3/5: abandon) and a target-2 one (complete, saturated)."""
    m = build("sara", {})
    m.setup(problems, {})
    ctx = make_ctx(model, tok, zero_reward)
    groups = m.rollout(problems[:4], ctx, np.random.default_rng(0))
    st = m.last_stats
    assert groups == [] and st["rollouts"] == 32 and st["abandoned"] == 9 and st["refill_prompts"] == 5
    assert st["rounds"] == 8 and st["abandoned_rollouts"] == 32
    by = ctx.engine.meter.by_purpose()
    assert by["discarded"]["sequences"] == 32 and by["train_rollout"]["generated_tokens"] == 0
    m.observe(groups)                        # abandoned outcomes still reach the posterior
    assert m.post.params(problems[0].uid) == (1.0, 5.0)
    # a capped number of rounds stops early and says what it generated
    m2 = build("sara", {"max_rounds": 3})
    m2.setup(problems, {})
    ctx2 = make_ctx(model, tok, zero_reward)
    assert m2.rollout(problems[:4], ctx2, np.random.default_rng(0)) == []
    assert m2.last_stats["rollouts"] == 20 == ctx2.engine.meter.totals()["sequences"]


@pytest.mark.parametrize("name", ["sara", "sara_dps"])
def test_sara_mixed_groups_committed_and_every_token_metered(name, problems, tok, model):
    m = build(name, {})
    m.setup(problems, {})
    ctx = make_ctx(model, tok, parity_reward)
    groups = m.rollout(problems[:4], ctx, np.random.default_rng(1))
    by = ctx.engine.meter.by_purpose()
    assert ctx.engine.meter.totals()["sequences"] == m.last_stats["rollouts"] <= 32
    kept = sum(len(r) for g in groups for r in g.responses)
    assert by["train_rollout"]["generated_tokens"] == kept
    assert by.get("discarded", {}).get("sequences", 0) == m.last_stats["abandoned_rollouts"]
    assert groups and all(g.meta["sara_decision"] == "commit" and g.n == g.meta["sara_target"] for g in groups)
    assert len({g.uid for g in groups}) == len(groups)


def test_sara_dps_prefers_uncertain_prompts(problems):
    m = build("sara_dps", {"dps_candidates": 4})
    m.setup(problems, {})
    for i, p in enumerate(problems):         # sharp posteriors: the first 4 near 0.5, the rest near 0
        m.post.add(p.uid, 500.0 if i < 4 else 0.0, 500.0 if i < 4 else 5000.0)
    chosen = m.take_batch(problems[8:12], np.random.default_rng(0))
    assert sorted(p.uid for p in chosen) == sorted(p.uid for p in problems[:4])


def test_sara_step_with_every_prompt_abandoned_trains_on_nothing(problems, tok, model, tmp_path):
    """On a saturated pool SARA returns no group: the trainer's step still runs (no update),
    logs SARA's numbers and checkpoints its posterior; the next step resumes from it."""
    import copy

    from components.stages.base import NullTracker
    from components.trainer.embedded import EmbeddedTrainer
    from components.trainer.train_config import TrainConfig

    cfg = TrainConfig(method="sara", steps=2, batch_prompts=4, max_new_tokens=8, val_size=0, seed=1, ckpt_every=1)
    t = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, zero_reward, NullTracker())
    before = [p.detach().clone() for p in t.model.parameters()]
    summary = t.fit(problems, [], {}, tmp_path)
    assert summary["steps"] == 2
    rows = [h for h in t.history if "method/rollouts" in h]
    assert [h["method/rollouts"] for h in rows] == [32.0, 32.0] and all(h["method/committed"] == 0 for h in rows)
    assert all(torch_equal(a, b) for a, b in zip(before, t.model.parameters()))
    assert t.method.post.counts                      # abandoned probes reached the posterior


def torch_equal(a, b) -> bool:
    return bool((a == b).all())
