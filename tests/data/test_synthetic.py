"""The synthetic arithmetic task: determinism, exact answers, correct expert traces."""
from __future__ import annotations

import re

import pytest

from components.data.schema import read_problems, write_problems
from components.data.synthetic import (check_trace, evaluate, expert_trace, format_prompt, generate_problems,
                                       level_counts, parse_prompt, parse_steps)

STEP = re.compile(r"(-?\d+)([+-])(\d+)=(-?\d+)\. ")


def test_example_from_the_spec():
    terms = [42, 59, -77, 97, -99]
    assert format_prompt(terms) == "Compute 42+59-77+97-99."
    assert expert_trace(terms) == " 42+59=101. 101-77=24. 24+97=121. 121-99=22. \\boxed{22}"
    assert evaluate(terms) == 22


def test_negative_intermediates_are_written_with_their_sign():
    trace = expert_trace([12, -59, 30])
    assert trace == " 12-59=-47. -47+30=-17. \\boxed{-17}"
    assert check_trace(trace, [12, -59, 30])


def test_deterministic_by_seed_and_different_across_seeds():
    a = generate_problems(200, {2: 1, 3: 1, 5: 2}, seed=7)
    b = generate_problems(200, {2: 1, 3: 1, 5: 2}, seed=7)
    c = generate_problems(200, {2: 1, 3: 1, 5: 2}, seed=8)
    assert a == b
    assert [p.prompt for p in a] != [p.prompt for p in c]


def test_uids_unique_and_content_addressed():
    probs = generate_problems(500, [2, 3, 4, 5, 6, 7, 8], seed=1)
    assert len({p.uid for p in probs}) == len(probs)
    assert len({p.prompt for p in probs}) == len(probs)
    other = generate_problems(500, [2, 3], seed=2)
    by_prompt = {p.prompt: p.uid for p in probs}
    assert all(by_prompt[p.prompt] == p.uid for p in other if p.prompt in by_prompt)


def test_exclude_avoids_given_uids():
    train = generate_problems(100, [2], seed=0, operand_digits=1)   # of 9*9*2 = 162 distinct
    held = generate_problems(60, [2], seed=1, operand_digits=1, exclude={p.uid for p in train})
    assert not ({p.uid for p in held} & {p.uid for p in train})


def test_impossible_request_fails_loudly():
    with pytest.raises(ValueError, match="distinct"):
        generate_problems(200, [2], seed=0, operand_digits=1)   # only 162 distinct 1-digit pairs


def test_answers_traces_and_fields():
    for p in generate_problems(300, {2: 1, 4: 1, 8: 1}, seed=3):
        terms = parse_prompt(p.prompt)
        assert p.meta["terms"] == terms
        assert p.level == len(terms)
        assert all(10 <= abs(t) <= 99 for t in terms) and terms[0] > 0
        # answer from the terms, independently of the module's own evaluate()
        acc = 0
        for t in terms:
            acc += t
        assert p.answer == str(acc)
        assert len(p.traces) == 1
        trace = p.traces[0]
        steps = STEP.findall(trace)
        assert len(steps) == len(terms) - 1
        prev = terms[0]
        for (a, op, b, c), t in zip(steps, terms[1:]):
            assert int(a) == prev and (op == "+") == (t >= 0) and int(b) == abs(t)
            assert int(c) == (int(a) + int(b) if op == "+" else int(a) - int(b))
            prev = int(c)
        assert trace.endswith(f"\\boxed{{{p.answer}}}")
        assert check_trace(trace, terms)


def test_check_trace_rejects_wrong_traces():
    good = expert_trace([42, 59, -77])
    assert check_trace(good)
    assert not check_trace(good.replace("=101", "=102"))
    assert not check_trace(good.replace("\\boxed{24}", "\\boxed{25}"))
    assert not check_trace(" 42+59=101. 100-77=23. \\boxed{23}")       # does not chain
    assert not check_trace(good, [42, 59, 77])                         # other terms
    assert not check_trace("")


def test_operand_digits():
    for p in generate_problems(50, [3], seed=0, operand_digits=3):
        assert all(100 <= abs(t) <= 999 for t in p.meta["terms"])


def test_level_distribution_is_exact():
    mix = {2: 0.35, 3: 0.35, 4: 0.25, 5: 0.05}
    probs = generate_problems(1000, mix, seed=0)
    counts = {lv: sum(p.level == lv for p in probs) for lv in mix}
    assert counts == {2: 350, 3: 350, 4: 250, 5: 50}
    assert level_counts(10, [2, 3, 4]) == {2: 4, 3: 3, 4: 3}
    assert sum(level_counts(7, {2: 1, 6: 3}).values()) == 7
    # shuffled, not blocked by level
    assert len({p.level for p in probs[:50]}) > 1
    with pytest.raises(ValueError):
        level_counts(5, [1])
    with pytest.raises(ValueError):
        level_counts(5, [9])


def test_parse_steps_cuts_at_step_boundaries():
    terms = [42, 59, -77, 97, -99]
    trace = expert_trace(terms)
    offs = parse_steps(trace)
    assert len(offs) == len(terms) - 1
    assert trace[:offs[0]] == " 42+59=101. "
    assert trace[offs[-1]:] == "\\boxed{22}"
    for k, off in enumerate(offs):
        assert trace[off - 2:off] == ". "
        assert len(STEP.findall(trace[:off])) == k + 1
    assert parse_steps(expert_trace([12, -59, 30])) == [12, 24]


def test_roundtrip_through_jsonl(tmp_path):
    probs = generate_problems(20, [2, 5], seed=4)
    write_problems(tmp_path / "p.jsonl", probs)
    assert read_problems(tmp_path / "p.jsonl") == probs
