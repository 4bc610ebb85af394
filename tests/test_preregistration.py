"""The preregistration block of a claims sweep: it must describe its sweep, field by field, with
one-line errors naming file and field; the tables stage gets it."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from components.sweep import SweepError, load_sweep, parse_sweep

REPO = Path(__file__).resolve().parents[1]
PILOT = REPO / "dags" / "sweeps" / "study_pilot.yaml"
STUDIES = sorted((REPO / "dags" / "sweeps").glob("study_*.yaml"))


def pilot() -> dict:
    return yaml.safe_load(PILOT.read_text())


def test_every_study_is_preregistered_and_the_tables_get_it():
    assert STUDIES and PILOT in STUDIES
    for f in STUDIES:
        s = load_sweep(f)
        assert s.preregistration is not None, f
        assert s.stages.tables["preregistration"] == s.preregistration.model_dump()


@pytest.mark.parametrize("edit, field, problem", [
    (lambda d: d.update(seeds=[0, 1, 2, 3]), "preregistration.seeds", "3 is not the sweep's 4 seeds"),
    (lambda d: d["stages"]["train"].update(steps=200), "preregistration.updates", "120 is not stages.train.steps 200"),
    (lambda d: d["stages"]["train"].pop("steps"), "stages.train.steps", "sets its updates explicitly"),
    (lambda d: d.update(methods=["grpo", "vsr"]), "preregistration.methods", "is not the sweep's methods"),
    (lambda d: d["preregistration"]["eval_sets"].update(arith_levels=1050), "preregistration.eval_sets.arith_levels",
     "1050 problems, but the sweep scores 400"),
    (lambda d: d["preregistration"]["eval_sets"].update(heldout=500), "preregistration.eval_sets.heldout",
     "more than the sweep can score (400)"),
    (lambda d: d.update(benchmarks=[]), "preregistration.eval_sets", "is not what the sweep evaluates on"),
    (lambda d: d["preregistration"].update(primary="math500"), "preregistration.primary", "is not one of eval_sets"),
    (lambda d: d["preregistration"].update(claims=["grpo>bse"]), "preregistration.claims[0]", "unknown claim"),
    (lambda d: d["preregistration"].update(claims=["vsr>grpo"]), "preregistration.claims[0]",
     "not in methods: ['vsr']"),
    (lambda d: (d.update(methods=["grpo", "vsr_no_scoring", "vsr"]), d["preregistration"].update(
        methods=["grpo", "vsr_no_scoring", "vsr"], claims=["no_scoring<vsr"])), "preregistration.claims[0]",
     "the paper's claim in the agentic setting; this sweep is math"),
    (lambda d: d["preregistration"].pop("stopping_rule"), "preregistration.stopping_rule", "required"),
    (lambda d: d["preregistration"].update(colour="red"), "preregistration.colour", "unknown key"),
])
def test_a_block_that_does_not_describe_its_sweep_is_refused(edit, field, problem):
    d = pilot()
    edit(d)
    with pytest.raises(SweepError) as e:
        parse_sweep(d, "study_pilot.yaml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"study_pilot.yaml: {field}: ") and problem in msg, msg


def test_paper_effects_must_be_the_papers():
    d = pilot()
    d["methods"] = ["grpo", "vsr"]
    d["preregistration"].update(methods=["grpo", "vsr", "base"], claims=["grpo>base", "vsr>grpo"])
    with pytest.raises(SweepError, match=r"preregistration.paper_effects: names \[\]; .* are \['vsr>grpo'\]"):
        parse_sweep(d, "s.yaml")
    d["preregistration"]["paper_effects"] = {"vsr>grpo": 0.3}
    with pytest.raises(SweepError, match=r"preregistration.paper_effects.vsr>grpo: 0.3 is not .* 0.2403"):
        parse_sweep(d, "s.yaml")
    d["preregistration"]["paper_effects"] = {"vsr>grpo": 0.2403}
    assert parse_sweep(d, "s.yaml").preregistration.paper_effects == {"vsr>grpo": 0.2403}


def test_validates_in_the_kfp_environment():
    # the compiled pipeline's validation runs there, without numpy or pandas
    py = REPO / ".venv-kfp" / "bin" / "python"
    if not py.exists():
        pytest.skip("no .venv-kfp (make kfp-env) in this checkout")
    code = ("import sys; from components.sweep import load_sweep; [load_sweep(f) for f in sys.argv[1:]]; "
            "assert 'pandas' not in sys.modules and 'numpy' not in sys.modules")
    out = subprocess.run([str(py), "-c", code, *map(str, STUDIES)], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
