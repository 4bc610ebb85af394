"""The grader accepts every shipped benchmark gold, and its canonical rewrites, and rejects
clearly different answers (bench/grader_validation.py; rates and misses in bench/RESULTS.md).

One Grader with 2 workers grades ~5000 pairs; measured rates are 1.000 for self-consistency on
every benchmark, so the thresholds below leave room only for load-dependent timeouts.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from components.data.benchmarks import BENCHMARKS, load_benchmark
from components.reward.grader import Grader

_spec = importlib.util.spec_from_file_location(
    "grader_validation", Path(__file__).resolve().parents[2] / "bench" / "grader_validation.py")
gv = sys.modules.setdefault("grader_validation", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(gv)  # registered first: dataclasses look their module up

MIN_RATE = {"self": 0.99, "rewrite": 0.98, "neg_int": 1.0, "neg_other": 0.97}
# misses documented in bench/RESULTS.md ("Grader validation"): two "different" golds that are
# equal in value, and math-verify's leniency for an equation whose right side equals the gold
KNOWN = {("math500", "test/algebra/1837.json", "neg_other"), ("gaokao2023en", "gaokao2023en/6", "neg_other"),
         ("gaokao2023en", "gaokao2023en/49", "neg_other")}


@pytest.fixture(scope="module")
def grader():
    g = Grader(workers=2, timeout_s=10.0)
    yield g
    g.close()


@pytest.fixture(scope="module")
def results(grader):
    problems = {b: load_benchmark(b) for b in BENCHMARKS}
    cases = gv.build_cases(problems, neg_other_every=4)
    return gv.summarize(gv.run_cases(grader, cases))


@pytest.mark.parametrize("bench", list(BENCHMARKS))
def test_rates_per_benchmark(results, bench):
    table, misses = results
    for kind, (ok, n) in table[bench].items():
        if n:
            assert ok / n >= MIN_RATE[kind], (bench, kind, ok, n, [
                (c.uid, c.gold, c.response, r) for c, r in misses if c.bench == bench and c.kind == kind])
    assert table[bench]["self"][1] == len(load_benchmark(bench))


def test_no_unexplained_wrong_grades(results):
    """Every miss is a documented one or a load-dependent timeout/error (never 'wrong' or
    'unparsable' on a gold the loader produced)."""
    _, misses = results
    unexplained = [(c.bench, c.uid, c.kind, c.gold, c.response, r) for c, r in misses
                   if (c.bench, c.uid, c.kind) not in KNOWN and r not in ("timeout", "error")]
    assert not unexplained, unexplained


def test_canonical_rewrites_and_different_answers(grader):
    pairs = [("\\boxed{0.5}", "\\frac{1}{2}", True), ("\\boxed{\\frac{1}{2}}", "0.5", True),
             ("\\boxed{27.0}", "27", True), ("\\boxed{27}", "27", True), ("\\boxed{23}", "023", True),
             ("\\boxed{\\frac{\\pi}{3}}", "$\\frac{\\pi}{3}$", True), ("\\boxed{84, 69}", "69, 84", True),
             ("\\boxed{62.5\\%}", "62.5", True), ("\\boxed{58500}", "58500", True),
             ("\\boxed{28}", "27", False), ("\\boxed{0.6}", "\\frac{1}{2}", False),
             ("\\boxed{69}", "69, 84", False), ("\\boxed{(2,1)}", "(1,2)", False),
             ("\\boxed{24}", "23", False)]
    grades = grader.grade_batch([p[0] for p in pairs], [p[1] for p in pairs])
    assert [(g.reason == "correct") for g in grades] == [p[2] for p in pairs], list(zip(pairs, grades))
    # math-verify reads "58,500" as 58500 but "58, 500" as a set: multi-answer golds are joined
    # with ", " (the loader also drops thousands separators so that such golds are plain integers)
    grades = grader.grade_batch(["\\boxed{58500}", "\\boxed{58}", "\\boxed{500, 58}"],
                                ["58,500", "58,500", "58, 500"])
    assert [g.reason for g in grades] == ["correct", "wrong", "correct"]


def test_case_builder_covers_the_rules():
    p = next(x for x in load_benchmark("amc23") if x.answer == "27")
    assert ("27.0", "integer as float") in gv.rewrites(p)
    p = next(x for x in load_benchmark("aime24") if x.meta.get("answer_raw") == "023")
    assert ("023", "raw spelling") in gv.rewrites(p)
    p = next(x for x in load_benchmark("olympiadbench") if x.meta["answers"] == ["69", "84"])
    assert ("84, 69", "answers in reverse order") in gv.rewrites(p)
    p = next(x for x in load_benchmark("math500") if x.answer == "\\frac{14}{3}")
    assert gv.rewrites(p) == []  # not a terminating decimal
