"""The power calculation: variance components recovered from a matrix with known ones, the
half-width formula against the hierarchical bootstrap, and the seeds needed per claim."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.power import components, power_markdown, power_rows, seeds_needed
from analysis.stats import bootstrap_mean


def matrix(rng, S, P, sd_seed, sd_problem, sd_resid, mu=0.5):
    return (mu + rng.normal(0, sd_seed, (S, 1)) + rng.normal(0, sd_problem, (1, P))
            + rng.normal(0, sd_resid, (S, P)))


def test_components_recover_known_variances():
    c = components(matrix(np.random.default_rng(0), 300, 500, 0.03, 0.2, 0.1))
    assert c.var_seed == pytest.approx(0.03 ** 2, rel=0.35)
    assert c.var_problem == pytest.approx(0.2 ** 2, rel=0.1)
    assert c.var_resid == pytest.approx(0.1 ** 2, rel=0.05)
    one = components(matrix(np.random.default_rng(1), 1, 500, 0.0, 0.2, 0.0))
    assert one.var_seed == 0 and one.var_problem == pytest.approx(0.04, rel=0.2)
    with pytest.raises(ValueError, match="seeds x problems"):
        components(np.ones((3, 1)))


def test_half_width_agrees_with_the_hierarchical_bootstrap():
    A = matrix(np.random.default_rng(2), 5, 400, 0.02, 0.15, 0.08)
    e, c = bootstrap_mean(A), components(A)
    # the percentile bootstrap with 5 seeds runs narrower than the normal formula: same order
    assert 0.5 < (e.hi - e.lo) / 2 / c.half_width(5, 400) < 1.3


def test_seeds_needed_is_the_fewest_that_meet_the_target():
    c = components(matrix(np.random.default_rng(3), 8, 1000, 0.02, 0.1, 0.05))
    s = seeds_needed(c, 0.02, 1000, 40)
    assert s is not None and c.half_width(s, 1000) <= 0.02 < c.half_width(s - 1, 1000)
    assert seeds_needed(c, 1e-4, 1000, 40) is None               # the problem term alone exceeds it


def result(method, seed, per, where):
    return {"method": method, "train_seed": seed, "benchmark": where, "split": None, "label": f"{method}{seed}",
            "per_problem": {f"q{i}": float(v) for i, v in enumerate(per)}}


def test_power_rows_for_the_sanity_and_the_papers_claims():
    rng = np.random.default_rng(4)
    p = rng.uniform(0.1, 0.9, 400)
    res = [result("base", None, np.clip(p + rng.normal(0, .05, 400), 0, 1), "arith_levels")]
    res += [result("grpo", s, np.clip(p + 0.05 + rng.normal(0, .01) + rng.normal(0, .05, 400), 0, 1), "arith_levels")
            for s in range(3)]
    rows = {r["claim"]: r for r in power_rows(res, [400, 1050])}
    assert rows["grpo>base"]["effect_here"] == pytest.approx(0.05, abs=0.02)
    vsr = rows["vsr>grpo"]
    assert vsr["rel_effect"] == pytest.approx(0.2403, abs=1e-4) and vsr["target_half_width"] == pytest.approx(
        vsr["rel_effect"] * np.mean([list(r["per_problem"].values()) for r in res[1:]]) / 2)
    assert vsr["seeds@1050"] is None or vsr["seeds@1050"] <= vsr["seeds@400"] or vsr["seeds@400"] is None
    assert rows["vigor>grpo"]["target_half_width"] < vsr["target_half_width"]   # VIGOR's effect is ~2 %
    md = power_markdown(res, [400, 1050])
    assert "## Seeds needed for a 95 % half-width <= half the effect" in md and "| arith_levels |" in md
    with pytest.raises(ValueError, match="need >= 2 seeds of grpo"):
        power_rows(res[:2], [400])


def test_an_agentic_pilot_sizes_the_agentic_claims():
    rng = np.random.default_rng(5)
    p = rng.uniform(0.0, 0.5, 256)
    res = [{**result("base", None, np.clip(p + rng.normal(0, .05, 256), 0, 1), None), "split": "heldout",
            "task": "agentic"}]
    res += [{**result("grpo", s, np.clip(p + 0.03 + rng.normal(0, .05, 256), 0, 1), None), "split": "heldout",
             "task": "agentic"} for s in range(3)]
    claims = {r["claim"] for r in power_rows(res, [256])}
    assert claims == {"grpo>base", "no_scoring<vsr"}              # the agentic claims with a paper effect
    with pytest.raises(ValueError, match="mix tasks"):
        power_rows(res + [result("grpo", 9, p, "arith_levels")], [256])


def test_the_default_problem_counts_are_the_pilot_tasks(monkeypatch, capsys):
    import analysis.power as power

    rng = np.random.default_rng(6)
    p = rng.uniform(0.0, 0.5, 64)
    agentic = [{**result("base", None, p, None), "split": "heldout", "task": "agentic"}]
    agentic += [{**result("grpo", s, np.clip(p + 0.03 + rng.normal(0, .05, 64), 0, 1), None),
                 "split": "heldout", "task": "agentic"} for s in range(3)]
    monkeypatch.setattr(power, "sweep_results", lambda sweep: agentic)
    assert power.main(["study_agentic_pilot"]) == 0
    header = [ln for ln in capsys.readouterr().out.splitlines() if "seeds@" in ln][0]
    assert [f"seeds@{n}" for n in power.PROBLEM_COUNTS["agentic"]] == [
        c.strip() for c in header.split("|") if c.strip().startswith("seeds@")]
    assert power.main(["study_agentic_pilot", "--problems", "300"]) == 0
    assert "seeds@300" in capsys.readouterr().out
