"""Several boxes and percentages, graded as math-verify grades them (components/reward/extract.py):
a run of listed boxes is one answer with several parts; boxing several different answers to a
one-answer gold is wrong (no reward for hedging); ``28\\%`` is 28."""
from __future__ import annotations

import pytest

from components.reward import Grader, extract_answer, extract_boxed
from components.reward.extract import MAX_PARTS, RUN_GAP


@pytest.mark.parametrize("text,expected", [
    ("\\boxed{1},\\boxed{2},\\boxed{3}", "1, 2, 3"),
    ("So \\boxed{(2, 2)} \\quad\\text{and}\\quad \\boxed{(6, 2)}.", "(2, 2), (6, 2)"),
    ("$x_1 = \\boxed{1}$ or $x_2 = \\boxed{-2}$", "1, -2"),
    ("\\boxed{1}; \\boxed{2}", "1, 2"),
    ("\\boxed{1} \\boxed{2}", "1, 2"),                      # only spacing between: one list
    ("\\boxed{3} and \\boxed{3}", "3"),                     # a repeated part counts once
    ("\\boxed{5} then \\boxed{4}", "4"),                    # a correction: the last box alone
    ("\\boxed{1}, " + "x" * RUN_GAP + ", \\boxed{2}", "2"),  # too far apart to be one list
    ("\\boxed{\\boxed{5}}", "5"),
    ("\\boxed{1}, \\boxed{2", None),                        # last box unbalanced
    ("\\boxed{1}, \\boxed{ 2 }", "1, 2"),
    ("\\boxed{ 7 }", " 7 "),                                # one box: verbatim
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_bounds_the_run_and_stays_linear():
    text = ", ".join(f"\\boxed{{{i}}}" for i in range(200_000))  # ~2.6 MB
    out = extract_answer(text)
    assert out.split(", ") == [str(i) for i in range(200_000 - MAX_PARTS, 200_000)]
    assert extract_boxed(text) == "199999"


@pytest.fixture(scope="module")
def grader():
    with Grader(workers=2, timeout_s=5.0) as g:
        yield g


@pytest.mark.parametrize("response,gold,reason", [
    # several parts, each boxed
    ("\\boxed{(2, 2)} \\quad\\text{and}\\quad \\boxed{(6, 2)}", "(2, 2), (6, 2)", "correct"),
    ("\\boxed{(6, 2)} and \\boxed{(2, 2)}", "(2, 2), (6, 2)", "correct"),
    ("\\boxed{1},\\boxed{2},\\boxed{3}", "\\{1,2,3\\}", "correct"),
    ("\\boxed{1},\\boxed{2},\\boxed{3}", "1, 2, 3", "correct"),
    ("$x_1 = \\boxed{1}$, $x_2 = \\boxed{2}$", "x_1 = 1, x_2 = 2", "correct"),
    ("\\boxed{1}, \\boxed{2}", "1, 2, 3", "wrong"),          # a part missing
    ("\\boxed{1}, \\boxed{2}, \\boxed{3}", "1, 2", "wrong"),  # a part too many
    # hedging: several different answers to a one-answer gold
    ("\\boxed{1} or \\boxed{2}", "2", "wrong"),
    ("\\boxed{2} or \\boxed{1}", "2", "wrong"),
    ("It is \\boxed{4}, \\boxed{5}, \\boxed{6}", "5", "wrong"),
    ("$\\boxed{\\frac{1}{2}}$ or $\\boxed{0.5}$", "\\frac{1}{2}", "correct"),  # one value twice
    ("\\boxed{5} then \\boxed{4}", "4", "correct"),           # a correction, not a list
    # percentages: math-verify reads 28\% as 28
    ("\\boxed{28}", "28\\%", "correct"),
    ("\\boxed{28\\%}", "28\\%", "correct"),
    ("\\boxed{28\\%}", "28", "correct"),
    ("\\boxed{28 \\text{ percent}}", "28\\%", "correct"),
    ("\\boxed{0.28}", "28\\%", "wrong"),                      # math-verify: 0.28 is not 28
    ("\\boxed{29}", "28\\%", "wrong"),
    ("\\boxed{29\\%}", "28\\%", "wrong"),
    # units
    ("\\boxed{5 \\text{ cm}}", "5", "correct"),
    ("\\boxed{6 \\text{ cm}}", "5", "wrong"),
])
def test_multipart_and_percentage_grades(grader, response, gold, reason):
    g = grader.grade(response, gold)
    assert g.reason == reason, (response, gold, g)
    assert g.score == (1.0 if reason == "correct" else 0.0)
    assert g.extracted == extract_answer(response)
