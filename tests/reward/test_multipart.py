"""Several boxes (components/reward/extract.py): a run of listed boxes is one answer with several
parts, read the way math-verify reads them; the grades of such answers (hedges included) and of
percentages below, one gold at a time."""
from __future__ import annotations

import pytest

from components.reward import extract_answer, extract_boxed
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


# gold -> {reason: responses graded so}
GRADES = {
    "(2, 2), (6, 2)": {"correct": ["\\boxed{(2, 2)} \\quad\\text{and}\\quad \\boxed{(6, 2)}",
                                   "\\boxed{(6, 2)} and \\boxed{(2, 2)}"],
                       "wrong": ["\\boxed{(2, 2)}", "\\boxed{(2, 2)}, \\boxed{(6, 2)}, \\boxed{(1, 1)}"]},
    "\\{1,2,3\\}": {"correct": ["\\boxed{1},\\boxed{2},\\boxed{3}"]},
    "1, 2, 3": {"correct": ["\\boxed{3}, \\boxed{1}, \\boxed{2}"], "wrong": ["\\boxed{1}, \\boxed{2}"]},
    "1, 2": {"correct": ["\\boxed{1} or \\boxed{2}"], "wrong": ["\\boxed{1}, \\boxed{2}, \\boxed{3}"]},
    "x_1 = 1, x_2 = 2": {"correct": ["$x_1 = \\boxed{1}$, $x_2 = \\boxed{2}$"]},
    # hedging: several different answers to a one-answer gold are wrong in any order
    "2": {"wrong": ["\\boxed{1} or \\boxed{2}", "\\boxed{2} or \\boxed{1}", "\\boxed{2}; \\boxed{3}"]},
    "5": {"wrong": ["It is \\boxed{4}, \\boxed{5}, \\boxed{6}"],
          "correct": ["\\boxed{5} and \\boxed{5}", "$\\boxed{5}$ or $\\boxed{\\frac{10}{2}}$"]},
    "4": {"correct": ["\\boxed{5} then \\boxed{4}"]},  # a correction, not a list
    # ... also when the other answer does not parse: no number or fraction is read out of a list
    "0.8": {"unparsable": ["\\boxed{0.8} or \\boxed{\\text{a necessary but not a sufficient condition}}",
                           "\\boxed{0.8, \\text{anything}}"]},
    "\\frac{1}{4}": {"unparsable": ["\\boxed{\\frac{1}{4}} or \\boxed{(2,12) \\cup (12,102)}",
                                   "\\boxed{(2,12) \\cup (12,102)} or \\boxed{\\frac{1}{4}}"]},
    "10080": {"correct": ["\\boxed{10,\\!080}"]},  # a thousands separator is no list
    # percentages: math-verify reads 28\\% as 28
    "28\\%": {"correct": ["\\boxed{28}", "\\boxed{28\\%}", "\\boxed{28 \\text{ percent}}", "$\\boxed{28}\\%$"],
               "wrong": ["\\boxed{0.28}", "\\boxed{29}", "\\boxed{29\\%}"]},
    "28": {"correct": ["\\boxed{28\\%}"]},
    # units
    "6": {"correct": ["\\boxed{6 \\text{ cm}}", "$\\boxed{6}$ cm"], "wrong": ["\\boxed{5 \\text{ cm}}"]},
    # a set-builder gold gives no expression: the exact text only, never a number read out of it
    "\\{x|-2\\leq x < 1\\}": {"correct": ["\\boxed{\\{x|-2\\leq x < 1\\}}"],
                                 "unparsable": ["\\boxed{1}", "\\boxed{\\{x|-3\\leq x < 1\\}}"]},
}


def test_multi_part_hedge_and_percentage_grades(grader):
    cases = [(resp, gold, reason) for gold, by in GRADES.items() for reason, rs in by.items() for resp in rs]
    out = grader.grade_batch([c[0] for c in cases], [c[1] for c in cases])
    bad = [(c, g) for c, g in zip(cases, out)
           if g.reason != c[2] or g.score != (c[2] == "correct") or g.extracted != extract_answer(c[0])]
    assert not bad, bad
