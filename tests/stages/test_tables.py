"""The tables stage's paper side-by-side and VIGOR's rollouts-to-target, on evaluate /
train outputs written in their real formats (results.json, summary.json + metrics.jsonl)."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analysis import paper as P
from analysis.rollouts import accuracy_vs_rollouts, rollouts_table, rollouts_to_target, smoothed
from components.stages import tables
from components.stages.base import NullTracker, StageContext


def hist(rollouts_per_step, vals):
    """metric rows like the embedded trainer's: a step-0 validation, then update rows with
    ``rollouts`` and every ``val_every`` steps a ``val/accuracy``."""
    rows = [{"step": 0, "val/accuracy": vals[0]}]
    for s, r in enumerate(rollouts_per_step, start=1):
        row = {"step": s, "rollouts": float(r), "tokens/generated": 10.0 * r, "reward/mean": 0.1}
        if s in vals:
            row["val/accuracy"] = vals[s]
        rows.append(row)
    return rows


GRPO = ({"method": "grpo", "seed": 0}, hist([128] * 6, {0: 0.1, 2: 0.2, 4: 0.3, 6: 0.4}))
# VIGOR spends fewer rollouts per update and is at GRPO's best accuracy by step 4
VIGOR = ({"method": "vigor", "seed": 0}, hist([96] * 6, {0: 0.1, 2: 0.25, 4: 0.4, 6: 0.45}))


def test_accuracy_vs_rollouts_charges_each_validation_the_rollouts_so_far():
    assert accuracy_vs_rollouts(GRPO[1]) == [(0.0, 0.1), (256.0, 0.2), (512.0, 0.3), (768.0, 0.4)]
    assert rollouts_to_target(VIGOR[1], 0.4, window=1) == 4 * 96
    assert math.isnan(rollouts_to_target(GRPO[1], 0.41, window=1))


def test_smoothing_ignores_one_lucky_validation():
    lucky = hist([96] * 6, {0: 0.1, 2: 0.5, 4: 0.1, 6: 0.1})
    assert rollouts_to_target(lucky, 0.4, window=1) == 2 * 96
    assert math.isnan(rollouts_to_target(lucky, 0.4, window=3))     # trailing means .1 .3 .233 .233
    assert smoothed([(0, 0.1), (1, 0.5), (2, 0.1)], 2) == [(0, 0.1), (1, pytest.approx(0.3)), (2, pytest.approx(0.3))]


def test_rollouts_table_speedup_against_the_baseline_best():
    df, target = rollouts_table([GRPO, VIGOR], window=1)
    assert target == pytest.approx(0.4)                      # GRPO's best validation accuracy
    row = df.set_index("method")
    assert row.loc["grpo", "rollouts_to_target"] == 768 and row.loc["vigor", "rollouts_to_target"] == 384
    assert row.loc["vigor", "speedup_vs_grpo"] == pytest.approx(2.0)
    assert row.loc["vigor", "reached"] == "1/1"
    # a method whose seed never reaches the target has NaN, never a partial mean
    slow = ({"method": "vigor", "seed": 1}, hist([96] * 6, {0: 0.1, 6: 0.3}))
    df2, _ = rollouts_table([GRPO, VIGOR, slow], window=1)
    r2 = df2.set_index("method").loc["vigor"]
    assert math.isnan(r2["rollouts_to_target"]) and r2["reached"] == "1/2"
    # SFT generates no rollouts: left out rather than "reaching" the target for free
    sft = ({"method": "sft", "seed": 0}, [{"step": 0, "val/accuracy": 0.1}, {"step": 2, "val/accuracy": 0.9}])
    assert "sft" not in set(rollouts_table([GRPO, VIGOR, sft])[0]["method"])
    with pytest.raises(ValueError, match="baseline method 'rloo'"):
        rollouts_table([GRPO], baseline="rloo")


def test_rollouts_target_is_what_every_baseline_seed_reaches_with_an_interval_over_seeds():
    g1 = ({"method": "grpo", "seed": 1}, hist([128] * 6, {0: 0.1, 2: 0.2, 4: 0.35, 6: 0.3}))
    v1 = ({"method": "vigor", "seed": 1}, hist([96] * 6, {0: 0.1, 2: 0.35, 4: 0.4, 6: 0.45}))
    df, target = rollouts_table([GRPO, g1, VIGOR, v1], window=1)
    assert target == pytest.approx(0.35)                     # min over GRPO seeds of their best
    row = df.set_index("method")
    assert row.loc["grpo", "reached"] == "2/2"
    assert row.loc["vigor", "rollouts_to_target"] == pytest.approx((384 + 192) / 2)
    assert row.loc["vigor", "lo95"] == pytest.approx(192) and row.loc["vigor", "hi95"] == pytest.approx(384)


def _result(label, method, bench, mean, seed=0):
    # 30 problems, each solved in 16 samples a number of times that averages to ``mean``
    k = round(mean * 16 * 30)
    per = {f"p{i}": (k // 30 + (i < k % 30)) / 16 for i in range(30)}
    return {"label": label, "method": method, "benchmark": bench, "mean_at_k": mean, "maj_at_k": mean,
            "pass_at_k": {"1": mean}, "problems": 30, "samples_per_problem": 16, "split": None,
            "train_seed": seed, "train_steps": 10, "mean_at_k_by_seed": [mean, mean], "by_level": {},
            "eval_tokens": {"generated_tokens": 100, "prompt_tokens": 10}, "per_problem": per,
            "clip_ratio": 0.1}


def _write_inputs(root, results, runs):
    inputs = {}
    for r in results:
        d = root / f"eval_{r['label']}"
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps(r))
        inputs[d.name] = d
    for summary, h in runs:
        d = root / f"run_tiny-{summary['method']}-s{summary['seed']}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(summary))
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in h))
        inputs[d.name] = d
    return inputs


def test_tables_stage_writes_paper_side_by_side_and_rollouts(tmp_path):
    llama = "llama-3.2-3b-instruct"
    results = [_result(f"{llama}-vsr-s0@math500", "vsr", "math500", 0.50),
               _result(f"{llama}-grpo-s0@math500", "grpo", "math500", 0.40),
               _result(f"{llama}-grpo-s0@aime24", "grpo", "aime24", 0.05)]
    inputs = _write_inputs(tmp_path / "in", results, [GRPO, VIGOR])
    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(out_dir=out, work_dir=tmp_path / "w", inputs=inputs, tracker=NullTracker())
    res = tables.run(tables.Params(paper="vsr"), ctx)

    sbs = pd.read_csv(out / "paper_vs_measured.csv")
    cell = sbs[(sbs.method == "vsr") & (sbs.benchmark == "math500")].iloc[0]
    paper_value = next(r["value"] for r in P.VSR_TABLE1 if r["method"] == "vsr" and r["benchmark"] == "math500")
    assert cell.paper_value == paper_value and cell.measured == pytest.approx(50.0)
    assert cell.delta == pytest.approx(50.0 - paper_value)
    # GRPO's avg over the benchmarks it was measured on; methods never run stay empty
    g = sbs[(sbs.method == "grpo") & (sbs.benchmark == "avg")].iloc[0]
    assert g.measured == pytest.approx((40.0 + 5.0) / 2)
    assert sbs[sbs.method == "static_prefix"].measured.isna().all()
    assert res["paper_rows_measured"] == 5                   # vsr math500+avg, grpo math500+aime24+avg
    for f in ("paper_vs_measured.md", "paper_vs_measured.tex", "rollouts.png", "tokens_per_update.png",
              "curves.png", "accuracy.png"):
        assert (out / f).stat().st_size > 0, f
    speed = {r["method"]: r for r in res["rollouts_to_target"]}
    # smoothed (window 3): GRPO .1 .15 .2 .3, VIGOR .1 .175 .25 .367 -> both reach .3 at step 6
    assert speed["vigor"]["speedup_vs_grpo"] == pytest.approx(768 / 576)
    assert "Rollouts to validation accuracy 0.300" in (out / "tables.md").read_text()
    assert res["claims"]["vigor_rollouts<grpo"] == "inconclusive"          # one seed: no interval
    # math500: .50 vs .40 on 30 problems excludes zero, but one training seed cannot support a claim
    assert res["claims"]["vsr>grpo"] == "inconclusive"
    assert res["claims"]["no_scoring<vsr"] == "not tested"
    claims = (out / "claims.md").read_text()
    assert "| VSR | VSR beats GRPO on the hard subset | **inconclusive** | +0.1" in claims
    assert "1 training seed: would be supported" in claims


def test_no_baseline_run_means_no_rollouts_table(tmp_path):
    inputs = _write_inputs(tmp_path / "in", [_result("tiny-vigor-s0", "vigor", None, 0.1)], [VIGOR])
    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(out_dir=out, work_dir=tmp_path / "w", inputs=inputs, tracker=NullTracker())
    res = tables.run(tables.Params(), ctx)
    assert "rollouts_to_target" not in res and not (out / "rollouts_to_target.csv").exists()
    assert "paper_vs_measured.csv" not in {p.name for p in out.iterdir()}


def test_no_target_when_the_baseline_never_improves():
    flat = ({"method": "grpo", "seed": 0}, hist([128] * 6, {0: 0.3, 2: 0.2, 4: 0.3, 6: 0.25}))
    with pytest.raises(ValueError, match="never rose above its starting"):
        rollouts_table([flat, VIGOR], window=1)


def test_grading_reason_shares_per_method(tmp_path):
    results = [_result("tiny-grpo-s0", "grpo", None, 0.4), _result("tiny-vsr-s0", "vsr", None, 0.5)]
    inputs = _write_inputs(tmp_path / "in", results, [])
    reasons = {"grpo": ["correct"] * 6 + ["no_answer"] * 3 + ["timeout"], "vsr": ["wrong"] * 3 + ["unparsable"]}
    for m, rs in reasons.items():
        (inputs[f"eval_tiny-{m}-s0"] / "samples.jsonl").write_text(
            "".join(json.dumps({"uid": "p0", "seed": 0, "text": "", "score": float(r == "correct"), "reason": r}) + "\n"
                    for r in rs))
    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(out_dir=out, work_dir=tmp_path / "w", inputs=inputs, tracker=NullTracker())
    res = tables.run(tables.Params(), ctx)
    row = {r["method"]: r for r in res["grading_reasons"]}
    assert row["grpo"]["samples"] == 10 and row["grpo"]["no_answer"] == pytest.approx(0.3)
    assert row["grpo"]["timeout"] == pytest.approx(0.1) and row["grpo"]["unparsable"] == 0
    assert row["vsr"]["unparsable"] == pytest.approx(0.25) and row["vsr"]["error"] == 0
    assert pd.read_csv(out / "grading_reasons.csv").shape == (2, 6)
    assert "Grading reasons: share of evaluation samples" in (out / "tables.md").read_text()
    # a sample whose reason the grader never gives is bad input, named by file and line
    (inputs["eval_tiny-vsr-s0"] / "samples.jsonl").write_text('{"reason": "correct"}\n{"reason": "maybe"}\n')
    with pytest.raises(ValueError, match=r"samples.jsonl: line 2: field 'reason' is 'maybe'"):
        tables.run(tables.Params(), ctx)


def test_a_preregistered_sweep_prints_its_block_and_judges_its_claims_on_its_primary_set(tmp_path):
    import yaml

    from components.sweep import parse_sweep
    d = yaml.safe_load(open("dags/sweeps/study_pilot.yaml"))
    pre = parse_sweep(d, "study_pilot.yaml").stages.tables["preregistration"]
    results = [_result(f"tiny-grpo-s{s}@arith_levels", "grpo", "arith_levels", 0.6, s) for s in range(3)]
    results += [_result("tiny-base@arith_levels", "base", "arith_levels", 0.4, None)]
    results += [{**_result(f"tiny-grpo-s{s}", "grpo", None, 0.5, s), "split": "heldout"} for s in range(3)]
    results += [{**_result("tiny-base", "base", None, 0.5, None), "split": "heldout"}]
    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(out_dir=out, work_dir=tmp_path / "w", inputs=_write_inputs(tmp_path / "in", results, []),
                       tracker=NullTracker())
    res = tables.run(tables.Params(reference="base", preregistration=pre), ctx)
    assert res["claims"] == {"grpo>base": "supported"}                       # +0.2 on every problem, 3 seeds
    assert res["claims_by_set"]["heldout"] == {"grpo>base": "inconclusive"}  # equal there
    text = (out / "claims.md").read_text()
    assert text.startswith("## Pre-registration (committed before the run)")
    assert "| claims judged on | arith_levels |" in text and "## Pre-registered claims on arith_levels (the judged" in text
    assert "## Pre-registered claims on heldout (second measure)" in text
    assert text in (out / "tables.md").read_text()
    assert set(pd.read_csv(out / "claims.csv")["eval_set"]) == {"arith_levels", "heldout"}
    with pytest.raises(ValueError, match="preregistration.primary 'arith_levels' has no evaluation"):
        tables.run(tables.Params(reference="base", preregistration=pre), StageContext(
            out_dir=out, work_dir=tmp_path / "w", tracker=NullTracker(),
            inputs=_write_inputs(tmp_path / "in2", results[4:], [])))


def test_tables_and_tokens_stages_with_two_models(tmp_path):
    """A sweep of two models (the papers' tables): each model's held-out split has its own
    problems, so every row, paired difference and token count is per (model, method); a claim is
    the mean over models of each model's paired difference, runs pairing by (model, seed)."""
    from components.stages import tokens as tokens_stage

    def res(label, method, seed, prefix, mean, bench=None):
        per = {f"{prefix}{i}": float(min(1.0, mean + 0.01 * (i % 5))) for i in range(40)}
        return {"label": label, "method": method, "train_seed": seed, "benchmark": bench,
                "split": None if bench else "heldout", "problems": 40, "samples_per_problem": 4, "mean_at_k": mean,
                "maj_at_k": mean, "pass_at_k": {"1": mean}, "per_problem": per, "clip_ratio": 0.0}

    results, runs = [], {}
    for model, prefix, base, tok in (("a-1.5b", "a", 0.2, 100), ("b-7b", "b", 0.4, 300)):
        results += [res(f"{model}-base", "base", None, prefix, base),
                    res(f"{model}-base@math500", "base", None, "m", base, "math500")]
        for seed in (0, 1):
            for method, gain, share in (("grpo", 0.1, 1.0), ("vsr", 0.15 if model == "a-1.5b" else 0.11, 0.5)):
                results += [res(f"{model}-{method}-s{seed}", method, seed, prefix, base + gain),
                            res(f"{model}-{method}-s{seed}@math500", method, seed, "m", base + gain, "math500")]
                d = tmp_path / "in" / f"run_{model}-{method}-s{seed}"
                d.mkdir(parents=True)
                (d / "summary.json").write_text(json.dumps({"method": method, "seed": seed, "steps": 4}))
                (d / "metrics.jsonl").write_text("".join(json.dumps(
                    {"step": i, "rollouts": 8.0, "tokens/generated": tok * share, "val/accuracy": 0.1 * i}) + "\n"
                    for i in range(5)))
                (d / "tokens.json").write_text(json.dumps([{"step": i, "purpose": "train_rollout", "prompt_tokens": 10,
                                                            "generated_tokens": tok * share, "sequences": 8}
                                                           for i in range(4)]))
                runs[d.name] = d
    inputs = _write_inputs(tmp_path / "ev", results, [])
    tok_out = tmp_path / "tok"
    tok_out.mkdir()
    tokens_stage.run(tokens_stage.Params(),
                     StageContext(out_dir=tok_out, work_dir=tmp_path / "w1", inputs=runs, tracker=NullTracker()))
    tok = pd.read_csv(tok_out / "tokens.csv").set_index(["model", "method"])
    assert tok.loc[("b-7b", "grpo"), "generated_per_update"] == 300 and tok.loc[("a-1.5b", "vsr"), "generated_vs_grpo"] == 0.5

    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(out_dir=out, work_dir=tmp_path / "w2", inputs={**inputs, **runs, "tokens": tok_out},
                       tracker=NullTracker())
    res_ = tables.run(tables.Params(), ctx)
    df = pd.read_csv(out / "tables.csv").set_index(["eval_set", "model", "method"])
    assert len(df) == 12 and df.loc[("heldout", "b-7b", "vsr"), "generated_tokens"] == 600
    assert df.loc[("heldout", "a-1.5b", "vsr"), "diff_vs_grpo"] == pytest.approx(0.05)
    assert df.loc[("heldout", "b-7b", "vsr"), "diff_vs_grpo"] == pytest.approx(0.01)
    claims = pd.read_csv(out / "claims.csv").set_index("id")
    assert res_["claims"]["vsr>grpo"] == "supported"
    assert claims.loc["vsr>grpo", "effect"] == pytest.approx(0.03)                  # (0.05 + 0.01) / 2
    assert "2 models" in claims.loc["vsr>grpo", "note"] and claims.loc["vsr>grpo", "seeds"] == 2
    assert claims.loc["vsr_tokens<grpo", "effect"] == pytest.approx((-50 - 150) / 2)
    assert claims.loc["vsr_tokens<grpo", "seeds"] == 4                          # both models' runs, paired
    speed = pd.read_csv(out / "rollouts_to_target.csv")                         # a target per model
    assert sorted(speed["model"].unique()) == ["a-1.5b", "b-7b"] and (out / "rollouts_b-7b.png").is_file()
