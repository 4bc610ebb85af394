"""analysis/vigor_speedup.py: VIGOR's Theorem 2 closed form against its Monte-Carlo simulation."""
from __future__ import annotations

import numpy as np
import pytest

from analysis import vigor_speedup as V


def test_budget_conserving_form_is_eq22_at_alpha_gamma_one():
    for k in (1.1, 1.5, 3.0):
        for T in (1, 2, 4, 7):
            assert V.eta_budget_conserving(0.5, k, T) == pytest.approx(V.eta_closed(0.5, 2.0, k, T), rel=1e-12)
            assert V.eta_budget_conserving(0.25, k, T) == pytest.approx(V.eta_closed(0.25, 4.0, k, T), rel=1e-12)
    assert V.eta_closed(0.5, 2.0, 2.0, 1) == 1.0                 # one round is GRPO


def test_closed_form_is_the_one_the_method_documents():
    from components.methods.vigor import speedup

    for k in (1.2, 2.0, 4.0):
        assert speedup(k) == pytest.approx((V.eta_closed(0.5, 2.0, k, 4), V.speedup_closed(0.5, 2.0, k, 4)))


def test_eta_of_a_hand_batch():
    # round 0: all four (sum 10, 4 rollouts-units); round 1: top two (sum 7) at gamma = 2
    assert V.eta_of_draws(np.array([[4.0, 3.0, 2.0, 1.0]]), 0.5, 2.0, 2)[0] == pytest.approx(24 / 8 / 2.5)
    assert V.eta_of_draws(np.full((3, 100), 0.2), 0.5, 2.0, 4) == pytest.approx([1.0] * 3)   # no spread, no gain


def test_monte_carlo_agrees_with_the_closed_form_for_a_large_batch():
    mc = V.simulate(0.5, 2.0, 3.0, 4, prompts=200_000, reps=10, seed=1)
    closed = V.speedup_closed(0.5, 2.0, 3.0, 4)
    assert abs(mc.speedup - closed) < 4 * mc.speedup_se and abs(mc.speedup / closed - 1) < 2e-3
    assert abs(mc.eta - V.eta_closed(0.5, 2.0, 3.0, 4)) < 4 * mc.eta_se


def test_a_paper_sized_batch_falls_short_of_the_limit_under_a_heavy_tail():
    mc = V.simulate(0.5, 2.0, 1.5, 4, prompts=160, reps=4000, seed=2)
    assert (mc.speedup - V.speedup_closed(0.5, 2.0, 1.5, 4)) / mc.speedup_se < -3


def test_compute_skew_ratio_tends_to_its_constant():
    c = V.skew_constant(0.5, 3.0, 1.5)
    rows = V.skew_scaling(0.5, 3.0, 1.5, Ts=(2, 8, 64))
    gaps = [abs(r["speedup / (alpha^(-1/k))^(T/3)"] - c) for r in rows]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-6


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="k > 1"):
        V.eta_closed(0.5, 2.0, 1.0, 4)
    with pytest.raises(ValueError, match="alpha"):
        V.simulate(1.5, 2.0, 2.0, 4)
    with pytest.raises(ValueError, match="compute-skew"):
        V.skew_constant(0.5, 2.0, 2.0)


def test_main_prints_both_tables(capsys):
    text = V.main(["--prompts", "2000", "--reps", "3", "--batch-reps", "50"])
    assert "Eq. 25" in text and "20000" not in text and "2.3x" in text
    assert capsys.readouterr().out.strip() == text.strip()
