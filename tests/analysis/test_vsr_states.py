"""analysis/vsr_states.py: the VSR paper's checks of its state score (Figure 7, Appendix D.5):
the statistics against scipy's, and the rollouts on the tiny test policy with real grading."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from analysis import vsr_states as vs


def test_correlations_equal_scipys_and_ties_are_averaged():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, 40).astype(float)            # many ties
    y = x + rng.normal(0, 2, 40)
    assert vs.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert vs.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    assert np.isnan(vs.pearson([1, 1, 1, 1], [1, 2, 3, 4]))   # a constant side: undefined, not 0


def test_bootstrap_interval_resamples_problems_and_brackets_the_estimate():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(30), 3)
    x = rng.normal(size=90)
    y = x + rng.normal(0, 1, 90)
    est, lo, hi = vs.correlation_ci(x, y, groups, vs.pearson, b=400)
    assert lo < est < hi and 0.3 < est < 0.95
    assert vs.correlation_ci(x, 2 * x, groups, vs.pearson, b=50) == pytest.approx((1.0, 1.0, 1.0))


def test_curve_summary_fits_the_line_through_the_means():
    rates = {a: [a, a, a + 0.1, a - 0.1] for a in vs.ALPHAS}
    c = vs.curve_summary(rates)
    assert c["slope"] == pytest.approx(1.0) and c["intercept"] == pytest.approx(0.0, abs=1e-12)
    assert c["r2"] == pytest.approx(1.0) and c["problems"] == 4
    assert c["q25"][2] < c["mean"][2] < c["q75"][2]


@pytest.fixture
def ctx(tok, model):
    from components.data.prompting import encode_prompt
    from components.engine.base import SamplingParams, TokenMeter
    from components.methods.base import RolloutContext
    from components.stages.common import grade_fn, make_engine

    grade = grade_fn(workers=1)
    yield RolloutContext(engine=make_engine(model, tok, TokenMeter()), grade=grade,
                         encode_prompt=lambda p: encode_prompt(p, tok), sampling=SamplingParams(1.0, 1.0, 6, seed=0))
    grade.grader.close()


def test_truncated_expert_traces_on_a_random_policy(ctx):
    from components.data.synthetic import generate_problems

    problems = generate_problems(4, [2, 3], seed=0)
    c = vs.truncation_curve(ctx, problems, n=2)
    # the whole trace holds its boxed answer: graded correct; from the prompt alone a random
    # policy's 6 tokens never box the answer
    assert c["mean"][-1] == 1.0 and c["mean"][0] == 0.0 and c["problems"] == 4
    assert "Figure 7" in vs.report(c, None)


def test_prefix_checks_refuse_a_policy_without_mixed_groups(ctx):
    from components.data.synthetic import generate_problems

    with pytest.raises(ValueError, match="mixed first group") as e:
        vs.prefix_checks(ctx, generate_problems(4, [2], seed=1), n=2)
    assert "\n" not in str(e.value)


def test_prefix_checks_on_a_reward_that_mixes_groups(tok, model):
    # a verifiable reward of another task (the response text's length is even) gives mixed
    # groups on a random policy, so every branch of the D.5 checks runs on real rollouts
    from components.data.prompting import encode_prompt
    from components.data.synthetic import generate_problems
    from components.engine.base import SamplingParams, TokenMeter
    from components.methods.base import RolloutContext
    from components.stages.common import make_engine

    def even_length(texts, golds):
        return [(float(len(t) % 2 == 0), "correct" if len(t) % 2 == 0 else "wrong") for t in texts]

    ctx = RolloutContext(engine=make_engine(model, tok, TokenMeter()), grade=even_length,
                         encode_prompt=lambda p: encode_prompt(p, tok), sampling=SamplingParams(1.0, 1.0, 8, seed=0))
    out = vs.prefix_checks(ctx, generate_problems(12, [2, 3], seed=2), n=8, b=100)
    assert 3 <= out["mixed"] <= 12 and out["positions"] == list(vs.POSITIONS)
    for k in ("failed_success", "failed_all_fail", "successful_success", "successful_all_fail"):
        assert len(out[k]) == 3 and all(0.0 <= v <= 1.0 for v in out[k])
    est, lo, hi = out["pearson_pooled"]
    assert np.isnan(est) or lo <= est <= hi
    assert "Appendix D.5" in vs.report(None, out)
    # D.5 on the first mixed problems only: the scan covers every problem, the checks the first 3
    capped = vs.prefix_checks(ctx, generate_problems(12, [2, 3], seed=2), n=8, b=20, max_mixed=3)
    assert capped["mixed"] == 3 and capped["problems"] == 12
