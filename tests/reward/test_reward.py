"""Reward grading: boxed extraction, math-verify grading in worker processes, timeouts, cache."""
from __future__ import annotations

import time

import pytest

from components.reward import REASONS, Grade, Grader, extract_boxed, grade_responses

TOWER = "\\boxed{9^{9^{9^{9^{9^{9}}}}}}"  # math-verify's comparison of this with 1 never ends


# ---------------------------------------------------------------- extract_boxed
@pytest.mark.parametrize("text,expected", [
    ("so \\boxed{42}.", "42"),
    ("\\boxed{\\frac{a}{b}}", "\\frac{a}{b}"),
    ("first \\boxed{1} then \\boxed{2}", "2"),                  # last box wins
    ("\\fbox{7}", "7"),
    ("\\boxed{1} and \\fbox{x^{2}}", "x^{2}"),
    ("\\boxed {3}", "3"),
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),                         # escaped braces do not count
    ("\\boxed{\\left\\{ x \\right.}", "\\left\\{ x \\right."),
    ("\\boxed{a \\\\ b}", "a \\\\ b"),
    ("\\boxed{}", ""),
    ("\\boxed{\\boxed{5}}", "5"),                               # last occurrence = inner one
    ("no box here", None),
    ("\\boxed{1} \\boxed{2", None),                            # last box unbalanced
    ("\\boxed{{}", None),
    ("\\boxed 5", None),
    ("\\boxedx{5}", None),
    ("\\boxed", None),
    ("x\\", None),
    ("\\boxed{\ud800\udc80 1}", "\ud800\udc80 1"),
    ("", None),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_extract_boxed_never_raises_on_non_str():
    assert extract_boxed(None) is None  # type: ignore[arg-type]
    assert extract_boxed(b"\\boxed{1}") is None  # type: ignore[arg-type]


@pytest.mark.parametrize("text,expected_len", [
    ("a{b}\\frac" * 120_000, None),                               # 1 MB, no box
    ("\\boxed{" + "{" * 500_000 + "}" * 500_000 + "}", 1_000_000),  # 1 MB of nesting
    ("\\fbox{1}" + "\\boxedx" * 150_000, 1),                      # many near-misses
    ("\\boxed{" * 150_000, None),                                 # many unclosed boxes
    ("\\boxed{1}" + "\\{\\}" * 250_000, 1),
])
def test_extract_boxed_megabyte_inputs_are_fast(text, expected_len):
    t0 = time.perf_counter()
    out = extract_boxed(text)
    assert time.perf_counter() - t0 < 2.0  # linear: ~0.3 s worst case here
    assert (None if out is None else len(out)) == expected_len


# ---------------------------------------------------------------- Grader
@pytest.mark.parametrize("response,gold,reason", [
    ("The answer is \\boxed{\\frac{1}{2}}.", "0.5", "correct"),
    ("\\boxed{27.0}", "27", "correct"),
    ("\\boxed{22}", "-22", "wrong"),
    ("\\boxed{x^2+1}", "1+x^2", "correct"),
    ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", "correct"),
    ("\\boxed{(1, 2)}", "(1,2)", "correct"),
    ("\\boxed{3}", "\\boxed{3}", "correct"),                  # gold already boxed
    ("\\boxed{3}", "$3$", "correct"),
    ("\\boxed{\\sqrt{2}}", "1.41421356", "correct"),
    ("\\boxed{5}", "6", "wrong"),
    ("\\boxed{3\\%}", "3", "correct"),                        # via the $...$ retry
    ("\\boxed{" + "1+" * 1000 + "1}", "1", "unparsable"),       # no number picked out of it
    ("I think it's 5.", "5", "no_answer"),
    ("\\boxed{}", "5", "unparsable"),
    ("\\boxed{\\input{/etc/passwd}}", "1", "unparsable"),
    ("\\boxed{3}", "}{", "unparsable"),                         # gold that does not parse
    ("\\boxed{abc\udc80}", "1", "unparsable"),                  # lone surrogate survives IPC
    ("\\boxed{__import__('os').system('echo hi')}", "0", "unparsable"),
])
def test_grade_reasons(grader, response, gold, reason):
    g = grader.grade(response, gold)
    assert isinstance(g, Grade) and g.reason in REASONS
    assert g.reason == reason
    assert g.score == (1.0 if reason == "correct" else 0.0)
    assert g.extracted == extract_boxed(response)


def test_grade_batch_mixed_and_odd_inputs(grader):
    responses = ["\\boxed{2}", None, b"\\boxed{3}", 17, "\\boxed{" + "1" * 20_000 + "}",
                 "\\boxed{" + "{" * 5000 + "}" * 5000 + "}"]
    out = grader.grade_batch(responses, ["2", "3", "3", "17", "1", "1"])  # type: ignore[list-item]
    assert [g.reason for g in out] == ["correct", "no_answer", "correct", "no_answer",
                                       "unparsable", out[5].reason]
    assert out[5].reason in ("unparsable", "wrong", "timeout")
    with pytest.raises(ValueError):
        grader.grade_batch(["\\boxed{1}"], [])


def test_megabyte_response_without_box_is_fast_and_skips_workers(grader):
    before = dict(grader.stats)
    t0 = time.perf_counter()
    g = grader.grade("Let me think. " * 75_000, "42")
    assert time.perf_counter() - t0 < 1.0
    assert g == Grade(0.0, "no_answer", None)
    assert grader.stats["worker_items"] == before["worker_items"]
    assert grader.stats["no_answer"] == before["no_answer"] + 1


def test_cache_hit_skips_workers(grader):
    first = grader.grade("\\boxed{\\frac{14}{6}}", "7/3")
    n = grader.stats["worker_items"]
    hits = grader.stats["cache_hits"]
    second = grader.grade("Another path: \\boxed{\\frac{14}{6}}", "7/3")  # same (gold, answer)
    assert first == second and first.reason == "correct"
    assert grader.stats["worker_items"] == n
    assert grader.stats["cache_hits"] == hits + 1
    # duplicates inside one batch reach the workers once
    out = grader.grade_batch(["\\boxed{101}"] * 6 + ["\\boxed{102}"], ["101"] * 7)
    assert [g.reason for g in out] == ["correct"] * 6 + ["wrong"]
    assert grader.stats["worker_items"] == n + 2


def test_large_batch_is_chunked_over_workers(grader):
    golds = [f"{i}/7" for i in range(120)]
    responses = [f"\\boxed{{\\frac{{{i + (i % 3 == 0)}}}{{7}}}}" for i in range(120)]
    out = grader.grade_batch(responses, golds)
    assert [g.score for g in out] == [0.0 if i % 3 == 0 else 1.0 for i in range(120)]
    assert len(grader._pool) == 2


def test_lru_cache_is_bounded():
    with Grader(workers=1, cache_size=2) as g:
        g.grade_batch(["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"], ["1", "1", "1"])
        assert len(g._cache) == 2
        n = g.stats["worker_items"]
        g.grade("\\boxed{1}", "1")  # evicted -> recomputed
        assert g.stats["worker_items"] == n + 1


def test_timeout_item_does_not_block_the_batch():
    with Grader(workers=2, timeout_s=1.0) as g:
        g.grade("\\boxed{0}", "0")  # warm start-up (not counted in the per-item limit anyway)
        responses = ["\\boxed{2}", TOWER, "\\boxed{3}", "\\boxed{4}", "\\boxed{5}", "\\boxed{7}"]
        golds = ["2", "1", "3", "4", "5", "6"]
        t0 = time.perf_counter()
        out = g.grade_batch(responses, golds)
        assert time.perf_counter() - t0 < 15.0
        assert [x.reason for x in out] == ["correct", "timeout", "correct", "correct", "correct",
                                           "wrong"]
        assert out[1].score == 0.0 and out[1].extracted == TOWER[7:-1]
        # still works afterwards, and the timeout was not cached
        assert g.grade("\\boxed{\\frac{1}{2}}", "0.5").reason == "correct"
        assert g.grade(TOWER, "1").reason == "timeout"


def test_hard_kill_when_math_verify_timeout_does_not_fire():
    # math-verify's own alarm (30 s) is later than the hard limit (0.5 s): the parent must kill.
    with Grader(workers=1, timeout_s=0.5, inner_timeout_s=30) as g:
        g.grade("\\boxed{0}", "0")
        t0 = time.perf_counter()
        out = g.grade_batch(["\\boxed{2}", TOWER, "\\boxed{3}"], ["2", "1", "3"])
        assert time.perf_counter() - t0 < 10.0
        assert [x.reason for x in out] == ["correct", "timeout", "correct"]
        assert g.stats["timeouts"] == 1 and g.stats["worker_starts"] == 2
        assert g.grade("\\boxed{4}", "4").reason == "correct"


def test_grader_restarts_after_close():
    g = Grader(workers=1)
    assert g.grade("\\boxed{1}", "1").reason == "correct"
    g.close()
    assert g.grade("\\boxed{1}", "2").reason == "wrong"
    g.close()


def test_grade_responses_convenience():
    out = grade_responses(["\\boxed{6}", "nothing"], ["6", "6"])
    assert [x.reason for x in out] == ["correct", "no_answer"]


def test_majority_vote_counts_a_multi_part_answer_as_one():
    # evaluate votes on extract_answer: "\boxed{5}, \boxed{2}" and "\boxed{1}, \boxed{2}" are
    # different answers, although their last boxes agree
    from components.algos.metrics import maj_at_k
    from components.reward import extract_answer
    rs = ["\\boxed{5}, \\boxed{2}", "\\boxed{1}, \\boxed{2}", "\\boxed{1}, \\boxed{2}", "\\boxed{9}", "\\boxed{9}"]
    correct = [False, True, True, False, False]
    assert [extract_answer(r) for r in rs] == ["5, 2", "1, 2", "1, 2", "9", "9"]
    assert maj_at_k([extract_answer(r) for r in rs], correct)
    assert not maj_at_k([extract_boxed(r) for r in rs], correct)
