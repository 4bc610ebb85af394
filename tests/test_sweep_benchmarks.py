"""Sweep-level benchmarks: validation, the evaluate map (model x target), and evaluate's
``benchmark`` param (cache keys of existing runs unchanged)."""
from __future__ import annotations

import pytest

from components import stage_graph
from components.sweep import SweepError, load_sweep

BASE = """name: t
seeds: [0]
models: [tiny]
model_specs: {tiny: {}}
methods: [grpo, vsr]
stages: {evaluate: {max_problems: 5}}
"""


def write(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_default_is_heldout_only(tmp_path):
    s = load_sweep(write(tmp_path, BASE))
    assert s.benchmarks == [] and s.heldout_eval
    assert [c["label"] for c in s.eval_cells()] == ["tiny-grpo-s0", "tiny-vsr-s0", "tiny-base"]
    assert s.evaluate_params("tiny-base") == {"max_problems": 5, "label": "tiny-base"}


def test_benchmarks_cross_every_model(tmp_path):
    s = load_sweep(write(tmp_path, BASE + "benchmarks: [aime24, math500]\n"))
    labels = [c["label"] for c in s.eval_cells()]
    assert labels[:3] == ["tiny-grpo-s0", "tiny-grpo-s0@aime24", "tiny-grpo-s0@math500"]
    assert len(labels) == 3 * 3 and "tiny-base@math500" in labels
    ev = [p for st, p in stage_graph.planned_params(s) if st == "evaluate"]
    assert {"max_problems": 5, "label": "tiny-vsr-s0@aime24", "benchmark": "aime24"} in ev
    s = load_sweep(write(tmp_path, BASE + "benchmarks: [aime24]\nheldout_eval: false\n"))
    assert [c["label"] for c in s.eval_cells()] == ["tiny-grpo-s0@aime24", "tiny-vsr-s0@aime24", "tiny-base@aime24"]


@pytest.mark.parametrize("extra, problem", [
    ("benchmarks: [aime24, aime24]\n", "benchmarks: duplicate benchmark 'aime24'"),
    ("benchmarks: [aime26]\n", "benchmarks: unknown benchmark 'aime26'"),
    ("heldout_eval: false\n", "heldout_eval: false needs at least one entry in benchmarks"),
])
def test_bad_benchmarks(tmp_path, extra, problem):
    with pytest.raises(SweepError) as e:
        load_sweep(write(tmp_path, BASE + extra))
    assert problem in str(e.value) and "\n" not in str(e.value)


def test_evaluate_params_benchmark_and_cache_key():
    from components.stages import evaluate
    old = evaluate.Params().model_dump(mode="json")
    assert "benchmark" not in old  # unset: the dump (hence every cached run's key) is unchanged
    p = evaluate.Params(benchmark="aime24", prompt_template="chat", top_p=0.7)
    assert p.model_dump(mode="json")["benchmark"] == "aime24"
    with pytest.raises(ValueError, match="unknown benchmark"):
        evaluate.Params(benchmark="nope")
