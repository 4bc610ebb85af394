"""analysis/paper_analyses.py: the papers' analyses as sections of a sweep's tables stage, on
train / evaluate records in their real formats; the stage graph hands the sampling analysis its
policies only when a sweep lists it; the tables stage's new fields leave other sweeps' cache keys."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pathlib import Path

from analysis import paper_analyses as pa
from analysis import vigor_speedup as sp

REPO = Path(__file__).resolve().parents[2]


def result(method, seed, per_problem):
    vals = list(per_problem.values())
    return {"label": f"tiny-{method}-s{seed}", "method": method, "train_seed": seed, "benchmark": None,
            "split": "heldout", "problems": len(vals), "samples_per_problem": 8, "mean_at_k": float(np.mean(vals)),
            "maj_at_k": 0.0, "pass_at_k": {"1": float(np.mean(vals))}, "per_problem": per_problem, "clip_ratio": 0.0}


def run(method, seed, mixed, steps=6, rollouts_per_update=128):
    hist = [{"step": s, "groups/mixed_frac": mixed, "rollouts": float(rollouts_per_update)} for s in range(1, steps + 1)]
    return {"method": method, "seed": seed, "steps": steps, "rollouts": rollouts_per_update * steps}, hist


def test_invalid_share_section_measures_one_minus_the_mixed_share(tmp_path):
    runs = [run("grpo", s, 0.5) for s in (0, 1)] + [run("vigor", s, 0.75) for s in (0, 1)]
    sec = pa.invalid_rollouts(pa.Inputs([], runs), tmp_path, {})
    by = {r["quantity"]: r for r in sec.rows}
    assert by["invalid share per update, grpo (%)"]["measured"] == 50.0
    assert by["invalid share per update, vigor (%)"]["measured"] == 25.0
    assert by["invalid share per update, vigor (%)"]["paper"] == 20.0      # VIGOR Appendix B
    assert sec.plot.is_file() and sec.plot.stat().st_size > 1000


def test_selection_section_compares_each_rule_with_variance_and_shows_the_budget(tmp_path):
    rng = np.random.default_rng(0)
    ps = {"vigor": 0.6, "vigor_random": 0.3, "vigor_difficulty": 0.3}
    results = [result(m, s, {f"q{i}": float(rng.binomial(8, p) / 8) for i in range(80)})
               for m, p in ps.items() for s in (0, 1)]
    runs = [run(m, s, 0.7, rollouts_per_update=128 if m != "vigor_random" else 96) for m in ps for s in (0, 1)]
    sec = pa.vigor_selection(pa.Inputs(results, runs), tmp_path, {})
    line = next(x for x in sec.markdown.splitlines() if x.startswith("| random "))
    assert line.rstrip(" |").endswith("96")             # the budget it spent, per update
    rand = next(r for r in sec.rows if "random" in r["quantity"])
    assert rand["measured"].startswith("-0.")           # Δ vs variance, paired, below zero here
    with pytest.raises(ValueError, match="missing: vigor_difficulty"):
        pa.vigor_selection(pa.Inputs([r for r in results if r["method"] != "vigor_difficulty"], runs), tmp_path, {})


def test_speedup_section_is_the_simulation_beside_the_closed_form(tmp_path):
    s = {"T": 4, "gamma": 2.0, "alpha": 0.5, "prompts": 20_000, "reps": 4, "seed": 0}
    sec = pa.vigor_speedup(pa.Inputs([], []), tmp_path, s)
    k3 = next(r for r in sec.rows if r["quantity"] == "speedup at k = 3")
    assert k3["paper"] == pytest.approx(sp.speedup_closed(0.5, 2.0, 3.0, 4), abs=1e-4)
    assert k3["measured"] == pytest.approx(k3["paper"], rel=0.02)
    assert sec.plot.is_file()


def test_run_all_writes_the_sections_their_plots_and_paper_vs_measured(tmp_path):
    runs = [run("grpo", 0, 0.5), run("vigor", 0, 0.8)]
    secs = pa.run_all(["invalid_rollouts"], pa.Inputs([], runs), tmp_path, {"invalid_rollouts": {}})
    md = (tmp_path / "analyses.md").read_text()
    assert [s.name for s in secs] == ["invalid_rollouts"] and "![invalid_rollouts](analysis_invalid_rollouts.png)" in md
    pvm = pd.read_csv(tmp_path / "paper_vs_measured_analyses.csv")
    assert list(pvm.columns) == ["analysis", "quantity", "paper", "paper source", "measured", "measured on"]


def test_vsr_states_refuses_a_sweep_without_policies(tmp_path):
    with pytest.raises(ValueError, match="needs the sweep's policies"):
        pa.vsr_states(pa.Inputs([], []), tmp_path, {})


def test_policies_reach_tables_only_when_an_analysis_samples_from_them():
    from components import stage_graph
    from components.sweep import load_sweep

    def tables_inputs(name):
        made, _ = stage_graph.walk(load_sweep(REPO / f"dags/sweeps/{name}.yaml"), stage_graph.dry_result)
        return next(c for c in made if c["stage"] == "tables")["inputs"]

    vsr = tables_inputs("analysis_vsr_states")
    assert {"policy_tiny", "hard_tiny", "hard_run_tiny-grpo-s0"} <= set(vsr)
    assert vsr["hard_tiny"] == vsr["hard_run_tiny-grpo-s0"]
    assert not [k for k in tables_inputs("analysis_vigor") if k.startswith(("policy_", "hard_"))]


def test_tables_params_keep_other_sweeps_cache_keys_and_refuse_an_unknown_analysis():
    from pydantic import ValidationError

    from components.stages.tables import Params

    assert set(Params().model_dump()) == set(Params(analyses=()).model_dump())
    assert "analyses" not in Params().model_dump() and "vsr_states" not in Params().model_dump()
    assert Params(analyses=["vsr_states"]).model_dump()["analyses"] == ("vsr_states",)
    with pytest.raises(ValidationError, match="analyses"):
        Params(analyses=["figure_8"])
