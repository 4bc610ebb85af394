"""pass@k / mean@k / maj@k, pinned to docs/methods.md TV13."""
from __future__ import annotations

from math import comb

import pytest

from components.algos.metrics import maj_at_k, majority_answer, mean_at_k, pass_at_k


@pytest.mark.parametrize("n,c,k,expected", [
    (10, 3, 1, 0.3),
    (10, 3, 5, 0.916667),
    (16, 0, 8, 0.0),
    (16, 2, 8, 0.766667),
    (5, 4, 2, 1.0),
])
def test_tv13_pass_at_k(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("n", [1, 4, 16, 40])
def test_pass_at_k_equals_binomial_form(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            exact = 1.0 if n - c < k else 1 - comb(n - c, k) / comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_large_n_is_stable():
    assert 0.0 < pass_at_k(1024, 1, 1) == pytest.approx(1 / 1024)
    assert pass_at_k(100_000, 3, 1000) == pytest.approx(1 - comb(99_997, 1000) / comb(100_000, 1000))


def test_pass_at_k_rejects_bad_inputs():
    for args in [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 0, 5)]:
        with pytest.raises(ValueError):
            pass_at_k(*args)


def test_tv13_mean_and_maj():
    answers = ["12", "12", "7", "12", "5", "7", "7", "7"]
    correct = [a == "7" for a in answers]
    assert mean_at_k(correct) == 0.5
    assert majority_answer(answers) == 2
    assert maj_at_k(answers, correct) is True


def test_maj_ties_first_occurrence_and_none_never_wins():
    assert majority_answer(["3", "4", "4", "3"]) == 0            # tie -> first occurring answer
    assert maj_at_k(["3", "4", "4", "3"], [False, True, True, False]) is False
    assert maj_at_k([None, None, None, "4"], [False, False, False, True]) is True
    assert maj_at_k([None, None], [False, False]) is False
    assert maj_at_k([], []) is False
    assert mean_at_k([]) == 0.0
    with pytest.raises(ValueError):
        maj_at_k(["1"], [True, False])
