"""Evaluation metrics over n sampled answers per problem (docs/methods.md §12).

* :func:`pass_at_k`: the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models
  Trained on Code", the Codex paper): 1 - C(n-c, k) / C(n, k), computed in the numerically
  stable product form 1 - prod_{i=n-c+1}^{n} (1 - k/i); it is exactly 1 when n - c < k.
* :func:`mean_at_k` (a.k.a. avg@k / Ave@32 / Acc@8): mean correctness over the samples.
* :func:`maj_at_k`: majority vote over the extracted answers, scored once. Ties are broken by
  first occurrence [INF, docs/methods.md §12]; ``None`` (no extracted answer) never wins; if no
  sample has an answer the vote is scored incorrect. The vote is over answer strings as given:
  normalise them first (e.g. strip whitespace) if equivalent spellings should pool.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["pass_at_k", "mean_at_k", "maj_at_k", "majority_answer"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021)."""
    n, c, k = int(n), int(c), int(k)
    if not (0 <= c <= n) or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"k={k} > n={n}: pass@k is not estimable from n samples")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def mean_at_k(correct: Sequence[bool]) -> float:
    """Mean correctness over the k samples (avg@k). Empty input -> 0.0."""
    correct = list(correct)
    return float(sum(bool(x) for x in correct) / len(correct)) if correct else 0.0


def majority_answer(answers: Sequence[str | None]) -> int | None:
    """Index of the first sample carrying the majority answer (ties: first occurrence), or None
    if no sample has an answer."""
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, a in enumerate(answers):
        if a is None:
            continue
        counts[a] = counts.get(a, 0) + 1
        first.setdefault(a, i)
    if not counts:
        return None
    # max() keeps the first maximal element; dict order is first-occurrence order.
    best = max(counts, key=counts.__getitem__)
    return first[best]


def maj_at_k(answers: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """maj@k: is the majority-voted answer correct?

    ``answers[i]`` is sample i's extracted answer (None if none) and ``correct[i]`` its grade;
    the voted answer is scored by the grade of (the first) sample that gave it.
    """
    if len(answers) != len(correct):
        raise ValueError(f"len(answers)={len(answers)} != len(correct)={len(correct)}")
    idx = majority_answer(answers)
    return False if idx is None else bool(correct[idx])
