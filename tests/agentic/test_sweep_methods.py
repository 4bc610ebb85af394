"""Methods on episodes in sweep files: a ``task: agentic`` sweep lists the registry's methods
that apply to episodes (TRACE among them), checked by name at DAG-parse time (no torch) and by config in
``rlvr sweep``'s pre-flight, each problem one line naming file and field."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from components.cli import app
from components.methods import registry
from components.sweep import SweepError, load_sweep

REPO = Path(__file__).resolve().parents[2]
AGENTIC = """\
name: ag
seeds: [0]
models: [tiny-agent]
model_specs: {tiny-agent: {}}
methods: [grpo, trace]
max_response_tokens: 8
stages:
  prepare_data: {task: agentic}
  pretrain: {task: agentic}
  filter_hard: {task: agentic}
  seed_prefixes: {task: agentic}
  train: {task: agentic, steps: 2}
  evaluate: {task: agentic}
method_config:
  trace: {n: 4, selection: top}
"""


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "ag.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def err(tmp_path, text: str) -> str:
    p = write(tmp_path, text)
    with pytest.raises(SweepError) as e:
        load_sweep(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{p}: "), msg
    return msg.removeprefix(f"{p}: ")


def test_agentic_sweep_lists_episodic_methods(tmp_path):
    s = load_sweep(write(tmp_path, AGENTIC))
    assert s.methods == ["grpo", "trace"] and s.task_of("trace") == "agentic"
    assert s.train_params("trace", 0)["method_config"] == {"n": 4, "selection": "top"}
    assert "trace" in registry.available("agentic") and "trace" not in registry.available("math")


@pytest.mark.parametrize("change, expect", [
    (("[grpo, trace]", "[grpo, tracee]"), "methods: unknown method 'tracee' (available: "),
    (("[grpo, trace]", "[grpo, sft]"),
     "methods: method 'sft' does not apply to task agentic (applies to: math; methods for agentic: "
     "cero, grpo, trace, vsr, vsr_no_recency, vsr_no_scoring)"),
    (("  trace: {n", "  sara: {n"), "method_config: method 'sara' does not apply to task agentic"),
    (("train: {task: agentic,", "train: {task: chess,"), "stages.train.task: unknown task 'chess' (known: agentic"),
])
def test_unknown_names_are_one_line(tmp_path, change, expect):
    assert err(tmp_path, AGENTIC.replace(*change)).startswith(expect)


def test_episodic_only_method_refused_in_a_math_sweep(tmp_path):
    math = AGENTIC.replace("{task: agentic, steps: 2}", "{steps: 2}")
    assert err(tmp_path, math).startswith("methods: method 'trace' does not apply to task math (applies to: agentic")


@pytest.mark.parametrize("config, expect", [
    ("{n: 4, bogus: 1}", "method_config.trace.bogus: unknown parameter (method trace)"),
    ("{n: 0}", "method_config.trace.n: Input should be greater than or equal to 1 (method trace)"),
])
def test_preflight_checks_the_episodic_config(tmp_path, monkeypatch, config, expect):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    bad = write(tmp_path, AGENTIC.replace("{n: 4, selection: top}", config))
    load_sweep(bad)   # names are fine: the config is the train stage's to check
    r = CliRunner().invoke(app, ["sweep", str(bad)])
    assert r.exit_code == 2 and r.stderr == f"{bad}: {expect}\n"
    assert not (tmp_path / "rlvr" / "airflow").exists()   # refused before Airflow


def test_registry_is_names_only_and_every_entry_builds_on_its_tasks():
    code = ("import sys; import components.sweep, components.methods.registry as r; "
            "assert 'torch' not in sys.modules, 'torch'; print(','.join(r.available('agentic')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split(",") == ["cero", "grpo", "trace", "vsr", "vsr_no_recency", "vsr_no_scoring"]
    for name in registry.available():
        for task in registry.entry(name).tasks:
            assert registry.build(name, {}, task=task).name == name
