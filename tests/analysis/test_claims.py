"""The uncertainty (analysis.stats), the per-method table with intervals (analysis.tables) and
the paper-claim verdicts (analysis.claims), on evaluate / train records in their real formats."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.claims import ABSENT_NOTES, CLAIMS, claims_markdown, evaluate_claim, evaluate_claims, model_size, val_windows
from analysis.stats import bootstrap_mean, paired_difference, seed_bootstrap
from analysis.tables import accuracy_table, readable


def result(method, seed, per_problem, label=None):
    vals = list(per_problem.values())
    return {"label": label or f"tiny-{method}-s{seed}", "method": method, "train_seed": seed,
            "benchmark": None, "split": "heldout", "problems": len(vals), "samples_per_problem": 16,
            "mean_at_k": float(np.mean(vals)), "maj_at_k": 0.0, "pass_at_k": {"1": float(np.mean(vals))},
            "per_problem": per_problem, "clip_ratio": 0.05}


def accuracies(rng, p, n=120):
    return {f"q{i}": float(rng.binomial(16, p[i] if hasattr(p, "__len__") else p) / 16) for i in range(n)}


def test_bootstrap_interval_brackets_the_mean_and_widens_with_fewer_problems():
    rng = np.random.default_rng(0)
    A = rng.binomial(16, 0.3, size=(3, 200)) / 16
    e = bootstrap_mean(A)
    assert e.lo < e.mean < e.hi and e.seeds == 3 and e.problems == 200
    small = bootstrap_mean(A[:, :20])
    assert (small.hi - small.lo) > (e.hi - e.lo)
    assert bootstrap_mean(A) == e                                  # fixed bootstrap RNG: a table is reproducible


def test_paired_difference_cancels_what_the_problems_share():
    rng = np.random.default_rng(1)
    difficulty = rng.uniform(0, 1, size=150)                      # shared by both methods
    A = np.clip(difficulty + 0.03 + rng.normal(0, 0.01, (3, 150)), 0, 1)
    R = np.clip(difficulty + rng.normal(0, 0.01, (3, 150)), 0, 1)
    d = paired_difference(A, R)
    unpaired_width = (bootstrap_mean(A).hi - bootstrap_mean(A).lo)
    assert d.lo > 0 and (d.hi - d.lo) < unpaired_width / 5
    # the base policy (one row) pairs with every training seed
    assert paired_difference(A, R[:1]).seeds == 3
    with pytest.raises(ValueError, match="seed counts"):
        paired_difference(A[:2], R)


def test_seed_bootstrap_needs_finite_values():
    e = seed_bootstrap([100, 200, 300])
    assert e.mean == 200 and 100 <= e.lo < e.hi <= 300
    with pytest.raises(ValueError):
        seed_bootstrap([100, float("nan")])


def test_accuracy_table_intervals_and_paired_difference_to_the_reference():
    rng = np.random.default_rng(2)
    p = rng.uniform(0.05, 0.4, size=120)
    res = [result("base", None, accuracies(rng, p), "tiny-base")]
    res += [result("grpo", s, accuracies(rng, p)) for s in range(3)]
    res += [result("vsr", s, accuracies(rng, np.clip(p + 0.15, 0, 1))) for s in range(3)]
    df = accuracy_table(res, runs=[({"method": "grpo", "seed": 0, "clip_ratio": 0.2}, [])]).set_index("method")
    assert list(df.index) == ["base", "grpo", "vsr"]
    assert df.loc["vsr", "seeds"] == 3 and df.loc["vsr", "lo95"] < df.loc["vsr", "mean@k"] < df.loc["vsr", "hi95"]
    assert df.loc["vsr", "diff_lo95"] > 0.05                      # +0.15 on every problem, 3 seeds
    assert np.isnan(df.loc["grpo", "diff_vs_grpo"])
    assert df.loc["grpo", "train_clip"] == 0.2 and df.loc["vsr", "eval_clip"] == pytest.approx(0.05)
    text = readable(df.reset_index()).to_markdown()
    assert "Δ vs grpo [95% CI]" in text and "mean@k [95% CI]" in text


def runs_for(method, seeds, tokens_per_update, vals, rollouts=128, extra=None):
    out = []
    for s in seeds:
        h = [{"step": 0, "val/accuracy": vals[0]}]
        for step in range(1, 7):
            row = {"step": step, "rollouts": float(rollouts), "tokens/generated": float(tokens_per_update + s)}
            row.update((extra or {}).get(step, {}))
            if step in vals:
                row["val/accuracy"] = vals[step]
            h.append(row)
        out.append(({"method": method, "seed": s}, h))
    return out


def test_claim_verdicts_supported_contradicted_inconclusive_and_not_tested():
    rng = np.random.default_rng(3)
    p = rng.uniform(0.05, 0.4, size=150)
    res = [result("grpo", s, accuracies(rng, p)) for s in range(3)]
    res += [result("vsr", s, accuracies(rng, np.clip(p + 0.2, 0, 1))) for s in range(3)]       # clearly better
    res += [result("sft", s, accuracies(rng, np.clip(p + 0.4, 0, 1))) for s in range(3)]       # better than vsr
    res += [result("vsr_no_scoring", s, accuracies(rng, np.clip(p + 0.2, 0, 1))) for s in range(3)]  # same as vsr
    runs = (runs_for("grpo", range(3), 1000, {0: .1, 2: .2, 4: .3, 6: .3})
            + runs_for("vsr", range(3), 800, {0: .1, 2: .3, 4: .4, 6: .4})
            + runs_for("vigor", range(3), 900, {0: .1, 2: .1, 4: .1, 6: .1}, rollouts=96))
    v = {x.claim.id: x for x in evaluate_claims(res, runs, window=1)}
    assert v["vsr>grpo"].verdict == "supported" and v["vsr>grpo"].lo > 0 and v["vsr>grpo"].seeds == 3
    assert v["vsr>sft"].verdict == "contradicted" and v["vsr>sft"].hi < 0
    assert v["no_scoring<vsr"].verdict == "not tested" and "agentic setting" in v["no_scoring<vsr"].note
    assert v["vsr_gigpo>gigpo"].verdict == "not tested"            # Table 2 is agentic; this sweep is math
    assert v["vsr>static_prefix"].verdict == "not tested" and "static_prefix" in v["vsr>static_prefix"].note
    assert v["vsr_tokens<grpo"].verdict == "supported" and v["vsr_tokens<grpo"].effect == pytest.approx(-200)
    assert v["vigor_rollouts<grpo"].verdict == "contradicted"     # never reaches what every GRPO seed reaches
    assert v["dapo_tokens>grpo"].verdict == "not tested"
    assert v["vigor>vigor_random"].verdict == "not tested" and "vigor_random" in v["vigor>vigor_random"].note
    md = claims_markdown(list(v.values()))
    absent = [c for c in v.values() if c.verdict == "not tested" and c.note.startswith(ABSENT_NOTES)]
    assert absent and md.count("\n| ") == len(CLAIMS) - len(absent) + 1   # header + a row per testable claim
    assert all(f"`{c.claim.id}`" in md and f"| {c.claim.text} |" not in md for c in absent)  # listed by id only
    assert "supported: 2" in md


def test_rollouts_claim():
    runs = (runs_for("grpo", range(3), 1000, {0: .1, 2: .2, 4: .3, 6: .4})
            + runs_for("vigor", range(3), 900, {0: .1, 2: .4, 4: .4, 6: .4}, rollouts=96))
    v = {x.claim.id: x for x in evaluate_claims([], runs, window=1)}
    r = v["vigor_rollouts<grpo"]
    assert r.verdict == "supported" and r.effect == pytest.approx(192 - 768) and "3/3" in r.note


def test_per_update_claims_pair_runs_by_model_and_seed():
    """Two models with the same seeds: every run counts (keyed by model and seed, not by seed
    alone, where the second model's runs would replace the first's)."""
    runs = []
    for model, grpo_tok, vsr_tok in (("m-1.5b", 1000, 800), ("m-7b", 3000, 2000)):
        for method, tok in (("grpo", grpo_tok), ("vsr", vsr_tok)):
            runs += [({**spec, "model": model}, h) for spec, h in runs_for(method, range(2), tok, {0: .1})]
    v = {x.claim.id: x for x in evaluate_claims([], runs)}["vsr_tokens<grpo"]
    assert v.seeds == 4 and v.effect == pytest.approx((-200 - 1000) / 2), v


def test_one_training_seed_never_supports_a_claim():
    rng = np.random.default_rng(4)
    p = rng.uniform(0.05, 0.4, size=150)
    res = [result("grpo", 0, accuracies(rng, p)), result("vsr", 0, accuracies(rng, np.clip(p + 0.3, 0, 1)))]
    v = {x.claim.id: x for x in evaluate_claims(res, [])}["vsr>grpo"]
    assert v.lo > 0 and v.verdict == "inconclusive" and "would be supported" in v.note


def with_estimator(runs, est):
    return [({**s, "adv_estimator": est}, h) for s, h in runs]


def test_accuracy_claim_pairs_rows_by_model_and_seed():
    """Rows pair by (model, training seed), whatever order the results come in; seeds that do
    not match are refused by name rather than paired by position."""
    rng = np.random.default_rng(3)
    p = rng.uniform(0.2, 0.6, size=200)
    res = []
    for model, gain in (("m-1.5b", 0.1), ("m-7b", 0.0)):
        for s in (0, 1):
            res.append(result("grpo", s, accuracies(rng, p, 200), f"{model}-grpo-s{s}"))
            res.append(result("vsr", s, accuracies(rng, np.clip(p + gain, 0, 1), 200), f"{model}-vsr-s{s}"))
    claim = next(c for c in CLAIMS if c.id == "vsr>grpo")
    runs = runs_for("grpo", range(2), 900, {0: .1}) + runs_for("vsr", range(2), 900, {0: .1})
    v = evaluate_claim(claim, res, runs)
    assert v.verdict != "not tested" and abs(v.effect - 0.05) < 0.02, v   # the mean over both models' pairs
    assert evaluate_claim(claim, res[::-1], runs).effect == v.effect       # order of the results is irrelevant
    base = [result("base", None, accuracies(rng, np.clip(p - g, 0, 1), 200), f"{m}-base")
            for m, g in (("m-1.5b", 0.2), ("m-7b", 0.0))]
    sanity = evaluate_claim(next(c for c in CLAIMS if c.id == "grpo>base"), res + base, runs)
    assert sanity.verdict == "supported" and abs(sanity.effect - 0.1) < 0.02, sanity   # each model's own base row
    moved = [dict(r, train_seed=2, label="m-7b-vsr-s2") if r["label"] == "m-7b-vsr-s1" else r for r in res]
    w = evaluate_claim(claim, moved, runs)
    assert w.verdict == "not tested" and "[('m-7b', 1), ('m-7b', 2)] on one side only" in w.note, w


def test_vip_claim_compares_like_with_like():
    rng = np.random.default_rng(5)
    p = rng.uniform(0.05, 0.4, size=150)
    res = [result("grpo", s, accuracies(rng, p)) for s in range(2)]
    res += [result("vip", s, accuracies(rng, np.clip(p + 0.2, 0, 1))) for s in range(2)]
    vip = runs_for("vip", range(2), 900, {0: .1, 6: .2})
    claim = next(c for c in CLAIMS if c.id == "vip>base_estimator")
    rloo = with_estimator(runs_for("grpo", range(2), 900, {0: .1, 6: .2}), "rloo")
    std = with_estimator(runs_for("grpo", range(2), 900, {0: .1, 6: .2}), "grpo")
    assert evaluate_claim(claim, res, with_estimator(vip, "rloo") + rloo).verdict == "supported"
    v = evaluate_claim(claim, res, with_estimator(vip, "rloo") + std)
    assert v.verdict == "not tested" and "different estimators" in v.note
    assert "do not record" in evaluate_claim(claim, res, vip + rloo).note


def test_claims_are_scoped_to_the_papers_setting():
    rng = np.random.default_rng(6)
    p = rng.uniform(0.05, 0.4, size=128)
    res = [{**result("grpo", s, accuracies(rng, p)), "task": "agentic"} for s in range(2)]
    res += [{**result("vsr", s, accuracies(rng, np.clip(p + 0.3, 0, 1))), "task": "agentic"} for s in range(2)]
    v = {x.claim.id: x for x in evaluate_claims(res, [])}
    assert v["vsr_gigpo>gigpo"].verdict == "supported"            # VSR Table 2: the agentic claim
    assert v["vsr>grpo"].verdict == "not tested" and "math setting" in v["vsr>grpo"].note


def test_recency_claim_in_its_time_shape():
    # w/o recency: ahead early (0.3 vs 0.1), flat after; full VSR: keeps climbing to 0.5
    early = {1: .3, 2: .3, 3: .3, 4: .3, 5: .3, 6: .3}
    vsr = {1: .1, 2: .1, 3: .3, 4: .3, 5: .5, 6: .5}
    runs = [({**s, "task": "agentic"}, h) for s, h in
            runs_for("vsr_no_recency", range(3), 500, {0: .0, **early}) + runs_for("vsr", range(3), 500, {0: .0, **vsr})]
    assert val_windows(runs[0][1]) == (pytest.approx(.3), pytest.approx(.3), 6)   # step 0 left out
    v = {x.claim.id: x for x in evaluate_claims([], runs)}
    assert v["no_recency>vsr@early"].verdict == "supported" and v["no_recency>vsr@early"].effect == pytest.approx(.2)
    assert v["no_recency_plateaus"].verdict == "supported" and v["no_recency_plateaus"].effect == pytest.approx(-.4)
    flipped = [({**s, "method": {"vsr": "vsr_no_recency", "vsr_no_recency": "vsr"}[s["method"]]}, h) for s, h in runs]
    v = {x.claim.id: x for x in evaluate_claims([], flipped)}
    assert v["no_recency>vsr@early"].verdict == "contradicted" and v["no_recency_plateaus"].verdict == "contradicted"


def test_a_bound_that_is_zero_up_to_float_rounding_decides_nothing():
    from analysis.claims import _decide
    noise = 0.3 - (0.1 + 0.2)          # zero in exact arithmetic, -5.6e-17 in floats
    assert noise < 0
    e = seed_bootstrap([-0.02, -0.01, noise, noise, noise])
    assert e.lo < 0 and e.hi == 0.0     # the replicates of three "zero" seeds are the top 2.5 %
    plateau = next(c for c in CLAIMS if c.id == "no_recency_plateaus")   # claimed: below zero
    assert _decide(plateau, e) == "inconclusive"
    assert _decide(plateau, seed_bootstrap([-0.02, -0.01, -1e-3, -1e-3, -1e-3])) == "supported"
    assert bootstrap_mean(np.array([[noise, 0.5], [noise, -0.5]])).mean == 0.0


def test_relative_gain_is_compared_across_model_sizes():
    rng = np.random.default_rng(7)
    p = rng.uniform(0.1, 0.4, size=200)
    res = []
    for model, gain in (("qwen2.5-math-1.5b", 0.15), ("qwen2.5-math-7b", 0.01)):
        for s in range(2):
            res.append(result("grpo", s, accuracies(rng, p), f"{model}-grpo-s{s}"))
            res.append(result("vip", s, accuracies(rng, np.clip(p + gain, 0, 1)), f"{model}-vip-s{s}"))
    runs = with_estimator(runs_for("grpo", range(2), 900, {0: .1}) + runs_for("vip", range(2), 900, {0: .1}), "rloo")
    claim = next(c for c in CLAIMS if c.id == "vip_gain_weaker_backbone")
    v = evaluate_claim(claim, res, runs)
    assert v.verdict == "supported" and v.lo > 0 and "qwen2.5-math-1.5b vs qwen2.5-math-7b" in v.note
    one = evaluate_claim(claim, [r for r in res if "1.5b" in r["label"]], runs)
    assert one.verdict == "not tested" and ">= 2 model sizes" in one.note
    assert model_size("meta-llama/Llama-3.2-3B-Instruct") == 3.0
    assert model_size("HuggingFaceTB/SmolLM2-135M-Instruct") == 0.135 and model_size("tiny-0.8m") == 0.0008
    with pytest.raises(ValueError, match="no model size"):
        model_size("tiny")


def test_relative_gain_interval_carries_the_training_seeds():
    """Two seeds of the small model disagree (one gains, one loses): the mean gain difference is
    positive, but with seeds resampled the interval must contain zero; a problems-only bootstrap
    would have excluded it (each seed's effect is measured on 400 problems)."""
    rng = np.random.default_rng(11)
    p = rng.uniform(0.2, 0.6, size=400)
    res = []
    for model, gains in (("m-0.5b", (0.12, -0.08)), ("m-3b", (0.0, 0.0))):
        for s, g in enumerate(gains):
            res.append(result("grpo", s, accuracies(rng, p, 400), f"{model}-grpo-s{s}"))
            res.append(result("vip", s, accuracies(rng, np.clip(p + g, 0, 1), 400), f"{model}-vip-s{s}"))
    runs = with_estimator(runs_for("grpo", range(2), 900, {0: .1}) + runs_for("vip", range(2), 900, {0: .1}), "rloo")
    claim = next(c for c in CLAIMS if c.id == "vip_gain_weaker_backbone")
    v = evaluate_claim(claim, res, runs)
    assert v.effect > 0 and v.lo < 0 < v.hi and v.verdict == "inconclusive", v
    v = evaluate_claim(claim, [r for r in res if r["label"] != "m-3b-vip-s1"], runs)   # seeds not paired
    assert v.verdict == "not tested" and "not paired by (model, training seed)" in v.note, v


@pytest.mark.parametrize("lo, hi, direction, verdict", [
    (0.01, 0.05, "higher", "supported"),
    (-0.05, -0.01, "higher", "contradicted"),
    (-0.02, 0.03, "higher", "smaller than the paper's effect"),      # excludes the paper's +0.04
    (-0.02, 0.06, "higher", "inconclusive"),                         # contains zero and the paper's effect
    (-0.03, 0.02, "lower", "smaller than the paper's effect"),       # claimed side is negative: excludes -0.04
    (-0.06, 0.02, "lower", "inconclusive"),
    (-0.05, -0.01, "lower", "supported"),
])
def test_four_verdicts_from_constructed_intervals(lo, hi, direction, verdict):
    from analysis.claims import Estimate, _decide
    c = next(c for c in CLAIMS if c.id == "vsr>grpo")
    c = type(c)(**{**c.__dict__, "direction": direction})
    assert _decide(c, Estimate((lo + hi) / 2, lo, hi, 5, 100), paper=0.04) == verdict
    if verdict == "smaller than the paper's effect":                 # without a paper effect it cannot tell
        assert _decide(c, Estimate((lo + hi) / 2, lo, hi, 5, 100)) == "inconclusive"


def bench(r):
    return {**r, "benchmark": "arith_levels", "split": None, "label": r["label"] + "@arith_levels"}


def test_smaller_than_the_paper_on_the_benchmark_and_inconclusive_when_it_cannot_tell():
    rng = np.random.default_rng(6)
    p = rng.uniform(0.3, 0.7, size=1000)
    # VSR equal to GRPO on a large benchmark: the interval (about +-0.01) excludes 24 % of ~0.5
    res = [bench(result(m, s, accuracies(rng, p, 1000))) for m in ("grpo", "vsr") for s in range(5)]
    # the hard held-out split beside it, where everything is near zero: the benchmark is judged
    res += [result(m, s, accuracies(rng, 0.02, 60)) for m in ("grpo", "vsr") for s in range(5)]
    v = {x.claim.id: x for x in evaluate_claims(res, [])}["vsr>grpo"]
    assert v.verdict == "smaller than the paper's effect" and "arith_levels, 1000 problems" in v.note
    assert v.paper_effect == pytest.approx(0.2403 * np.mean([r["mean_at_k"] for r in res[:5]]), rel=1e-3)
    assert v.lo < 0 < v.hi < v.paper_effect
    held = {x.claim.id: x for x in evaluate_claims(res, [], eval_set="heldout")}["vsr>grpo"]
    assert held.verdict == "inconclusive" and "heldout, 60 problems" in held.note   # 24 % of 0.02: unmeasurable
    md = claims_markdown([v, held])
    assert "smaller than the paper's effect: 1" in md and "inconclusive: 1" in md and "(+24.0%)" in md


def test_supported_but_smaller_says_so():
    rng = np.random.default_rng(7)
    p = rng.uniform(0.3, 0.6, size=1000)
    res = [bench(result("grpo", s, accuracies(rng, p, 1000))) for s in range(5)]
    res += [bench(result("vsr", s, accuracies(rng, np.clip(p + 0.03, 0, 1), 1000))) for s in range(5)]
    v = {x.claim.id: x for x in evaluate_claims(res, [])}["vsr>grpo"]
    assert v.verdict == "supported" and "excludes the paper's effect here" in v.note


def test_seed_001_cost_claims_per_update_with_the_papers_effect():
    from analysis.claims import SMALLER

    runs = (runs_for("grpo", range(3), 1000, {0: .1, 6: .2})
            + runs_for("pair", range(3), 480, {0: .1, 6: .2})
            + runs_for("dapo", range(3), 1500, {0: .1, 6: .2}, rollouts=160)
            + runs_for("sara", range(3), 1000, {0: .1, 6: .2}, rollouts=128))
    v = {x.claim.id: x for x in evaluate_claims([], runs, window=1)}
    pair = v["pair_tokens<grpo"]
    assert pair.verdict == "supported" and pair.effect == pytest.approx(-520)
    # the paper's share saved (PAIR's two models) x GRPO's mean per update (1000 + the seed offsets)
    assert pair.paper_effect == pytest.approx(-0.515 * 1001) and pair.units == "tokens/update difference"
    sara = v["sara_rollouts<dapo"]
    assert sara.verdict == "supported" and sara.effect == pytest.approx(-32) and "rollouts/update" in sara.note
    assert sara.paper_effect == pytest.approx(-0.22 * 160)
    assert v["sara_dps_rollouts<dapo"].verdict == "not tested"
    # the same tokens as GRPO: no reduction, and one the paper's size is ruled out
    same = runs_for("grpo", range(3), 1000, {0: .1, 6: .2}) + runs_for("pair", range(3), 1000, {0: .1, 6: .2})
    assert {x.claim.id: x for x in evaluate_claims([], same, window=1)}["pair_tokens<grpo"].verdict == SMALLER
