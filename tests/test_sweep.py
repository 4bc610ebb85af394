"""Sweep YAML parsing: the demo file, the grid, and one-line errors naming file and field."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from components import stage_graph
from components import sweep as sw
from components.sweep import SweepError, load_sweep

REPO = Path(__file__).resolve().parents[1]

BASE = """\
name: t
seeds: [0, 1]
models: [tiny]
model_specs: {tiny: {}}
methods: [grpo, vsr]
stages:
  train: {steps: 3}
method_config:
  vsr: {rho: 0.5}
"""


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def err(tmp_path, text) -> str:
    p = write(tmp_path, text)
    with pytest.raises(SweepError) as e:
        load_sweep(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{p}: "), msg
    return msg


def test_demo_file_loads():
    s = load_sweep(REPO / "dags" / "sweeps" / "demo.yaml")
    assert s.name == "demo" and s.executor == "local" and s.retries == 2
    assert [g["key"] for g in s.grid()] == ["tiny-grpo-s0", "tiny-vsr-s0", "tiny-sft-s0"]
    # the sweep's one response budget is filled into every generating stage
    assert s.stages.filter_hard == {"k": 32, "c": 1, "threads": 1, "max_new_tokens": 128}
    assert s.train_params("vsr", 0) == {"steps": 60, "batch_prompts": 16, "threads": 1, "max_new_tokens": 128,
                                        "method": "vsr", "seed": 0, "method_config": {"n": 8, "rho": 0.5}}
    assert s.train_params("sft", 0)["method_config"] == {}
    planned = stage_graph.planned_params(s)
    assert [st for st, _ in planned].count("train") == 3 and [st for st, _ in planned].count("evaluate") == 4
    assert ("evaluate", {"max_problems": 200, "threads": 1, "max_new_tokens": 128, "label": "tiny-base"}) in planned


def test_grid_order_and_keys(tmp_path):
    s = load_sweep(write(tmp_path, BASE.replace("models: [tiny]", "models: [tiny, Qwen/Qwen2.5-0.5B]")))
    g = s.grid()
    assert len(g) == 2 * 2 * 2
    assert [x["key"] for x in g[:4]] == ["tiny-grpo-s0", "tiny-grpo-s1", "tiny-vsr-s0", "tiny-vsr-s1"]
    assert g[4] == {"model": "Qwen/Qwen2.5-0.5B", "method": "grpo", "seed": 0, "key": "qwen2.5-0.5b-grpo-s0"}
    assert s.pretrain_params("Qwen/Qwen2.5-0.5B") == {"model": "Qwen/Qwen2.5-0.5B"}
    assert s.pretrain_params("tiny") == {}
    assert s.stages.tables == {} and s.retry_delay_s == 5.0


@pytest.mark.parametrize("text, where, problem", [
    (BASE + "bogus: 1\n", ": bogus: ", "unknown key"),
    (BASE.replace("  train:", "  trian:"), ": stages.trian: ", "unknown key"),
    (BASE.replace("name: t\n", ""), ": name: ", "required field is missing"),
    (BASE.replace("seeds: [0, 1]", "seeds: [0, x]"), ": seeds[1]: ", "integer"),
    (BASE.replace("seeds: [0, 1]", "seeds: [0, 0]"), ": seeds: ", "duplicate seed 0"),
    (BASE.replace("seeds: [0, 1]", "seeds: []"), ": seeds: ", "at least 1"),
    (BASE.replace("[grpo, vsr]", "[grpo, grpo]"), ": methods: ", "duplicate method 'grpo'"),
    (BASE.replace("[grpo, vsr]", "[grpo, vsrr]"), ": methods: ", "unknown method 'vsrr'"),
    (BASE.replace("  vsr: {rho", "  nope: {rho"), ": method_config: ", "unknown method 'nope'"),
    (BASE.replace("models: [tiny]", "models: [tiny, tiny]"), ": models: ", "duplicate model 'tiny'"),
    (BASE.replace("models: [tiny]", "models: [tiny, tinyy]"), ": models[1]: ", "not a key of model_specs"),
    (BASE.replace("  train: {steps: 3}", "  train: [1]"), ": stages.train: ", "dictionary"),
    (BASE + "executor: slurm\n", ": executor: ", "'local' or 'kubernetes'"),
    (BASE + "retries: -1\n", ": retries: ", "greater than or equal to 0"),
    (BASE.replace("name: t", "name: 'a b'"), ": name: ", "letters, digits"),
    ("- just a list\n", ": <root>: ", "expected a mapping"),
])
def test_errors_are_one_line_with_field(tmp_path, text, where, problem):
    msg = err(tmp_path, text)
    assert where in msg and problem in msg, msg


def test_yaml_syntax_error_names_line(tmp_path):
    msg = err(tmp_path, BASE + "stages: {train: [1, 2}\n")
    assert "line 10" in msg and "YAML syntax error" in msg, msg


def test_missing_file(tmp_path):
    with pytest.raises(SweepError, match="No such file"):
        load_sweep(tmp_path / "absent.yaml")


def test_methods_come_from_the_registry(tmp_path, monkeypatch):
    from components.methods import registry

    mine = BASE.replace("[grpo, vsr]", "[grpo, mine]").replace("  vsr: {rho", "  mine: {rho")
    assert "unknown method 'mine'" in err(tmp_path, mine)
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    registry.register("mine", "plugin.module:Mine")   # a plug-in, registered by name
    assert load_sweep(write(tmp_path, mine)).methods == ["grpo", "mine"]
    registry.register("mine", "plugin.module:Mine", tasks=("agentic",))
    assert "s.yaml: methods: method 'mine' does not apply to task math (applies to: agentic;" in err(tmp_path, mine)


def test_import_is_light():
    code = ("import sys, time; t=time.time(); import components.sweep; "
            "bad=[m for m in ('torch','airflow','mlflow','transformers') if m in sys.modules]; "
            "print(round(time.time()-t, 3)); assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[-1]) < 2.0


TEACHER = """\
name: t
seeds: [0]
models: [tiny]
teachers: [tiny_long]
model_specs: {tiny: {}, tiny_long: {steps: 600}}
methods: [grpo, opd]
method_config:
  opd: {teacher: tiny_long}
"""


def test_teacher_only_model_is_pretrained_and_evaluated_not_trained(tmp_path):
    s = load_sweep(write(tmp_path, TEACHER))
    assert s.pretrained_models() == ["tiny", "tiny_long"]
    assert {g["model"] for g in s.grid()} == {"tiny"} and s.teacher_of("opd") == "tiny_long"
    assert [e["label"] for e in s.eval_cells()] == ["tiny-grpo-s0", "tiny-opd-s0", "tiny-base", "tiny-teacher-tiny-long"]
    assert s.untrained_eval_models() == {"tiny-base": "tiny", "tiny-teacher-tiny-long": "tiny_long"}
    assert s.eval_cells()[-1]["model"] == "tiny"         # on the student's held-out set
    assert s.evaluate_params("tiny-teacher-tiny-long")["base_name"] == "teacher-tiny-long"
    assert "base_name" not in s.evaluate_params("tiny-base")
    planned = stage_graph.planned_params(s)
    assert [p for st, p in planned if st == "pretrain"] == [{}, {"steps": 600}]
    assert [st for st, _ in planned].count("filter_hard") == 1
    # a run of a subset of the methods (trigger form) does not pretrain a teacher nobody uses
    only_grpo = s.model_copy(update={"methods": ["grpo"]})
    assert only_grpo.pretrained_models() == ["tiny"]
    assert [e["label"] for e in only_grpo.eval_cells()] == ["tiny-grpo-s0", "tiny-base"]


@pytest.mark.parametrize("edit, where, problem", [
    (("teachers: [tiny_long]", "teachers: [tiny_long, tiny_long]"), ": teachers[1]: ", "duplicate teacher"),
    (("teachers: [tiny_long]", "teachers: [tiny_long, tiny]"), ": teachers[1]: ", "also in models"),
    (("teachers: [tiny_long]", "teachers: [tiny_lng]"), ": teachers[0]: ", "not a key of model_specs"),
    (("opd: {teacher: tiny_long}", "opd: {n: 8}"), ": teachers[0]: ", "no method's teacher"),
    (("teachers: [tiny_long]\n", ""), ": method_config.opd.teacher: ", "not one of the sweep's models or teachers"),
    (("teachers: [tiny_long]", "teachers: [tiny_long, TINY]"), ": teachers[1]: ", "same slug 'tiny'"),
])
def test_teacher_errors_name_the_field(tmp_path, edit, where, problem):
    text = TEACHER.replace(*edit).replace("tiny_long: {steps: 600}}", "tiny_long: {steps: 600}, TINY: {}}")
    msg = err(tmp_path, text)
    assert where in msg and problem in msg, msg
