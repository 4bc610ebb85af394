"""The embedded task's unfiltered benchmark: pinned content, every level, interleaved,
disjoint from training, and accepted wherever a benchmark name is."""
from __future__ import annotations

from collections import Counter

import pytest

from components.data import arith_benchmark as ab
from components.data.benchmarks import benchmark_names, load_benchmark
from components.data.synthetic import MAX_LEVEL, MIN_LEVEL, check_trace, generate_problems, parse_prompt


def test_pinned_every_level_interleaved_and_exact():
    ps = ab.load()
    assert len(ps) == len(ab.SPEC["levels"]) * ab.SPEC["per_level"]
    assert Counter(p.level for p in ps) == {lv: ab.SPEC["per_level"] for lv in range(MIN_LEVEL, MAX_LEVEL + 1)}
    levels = ab.SPEC["levels"]
    assert [p.level for p in ps[:2 * len(levels)]] == levels + levels  # any k*levels prefix is balanced
    assert len({p.uid for p in ps}) == len(ps)
    for p in ps[::37]:
        assert int(p.answer) == sum(parse_prompt(p.prompt)) and check_trace(p.traces[0], parse_prompt(p.prompt))


def test_digest_mismatch_raises(monkeypatch):
    monkeypatch.setitem(ab.SPEC, "per_level", 149)
    with pytest.raises(ValueError, match=r"arith_levels v1: content digest .* differs from the pinned"):
        ab.load()


def test_disjoint_from_the_sweeps_training_pools():
    # the default prepare_data draws (seeds 0..2) of every level the sweeps train on (5-8)
    pool = [p for s in range(3) for p in generate_problems(2000, [5, 6, 7, 8], seed=s * 3 + 1, operand_digits=1)]
    ab.check_disjoint(ab.load(), pool, "pool")
    with pytest.raises(ValueError, match=r"^train.jsonl: 1 training problems are in the arith_levels benchmark"):
        ab.check_disjoint(ab.load(), pool[:5] + [ab.load()[40]], "train.jsonl")


def test_a_benchmark_name_everywhere():
    from components.stages import evaluate
    assert "arith_levels" in benchmark_names() and "math500" in benchmark_names()
    assert len(load_benchmark("arith_levels")) == 1050
    assert evaluate.Params(benchmark="arith_levels").benchmark == "arith_levels"
