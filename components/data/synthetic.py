"""Synthetic multi-step arithmetic: the task the embedded (CPU) demo trains on.

A problem is a chain of signed integers, e.g. ``[42, 59, -77, 97, -99]``:

    prompt  "Compute 42+59-77+97-99."
    trace   " 42+59=101. 101-77=24. 24+97=121. 121-99=22. \\boxed{22}"

Why this shape:
- word-free and character-level, so a ~1M-parameter model can learn it in minutes;
- one step per operation, so a trace has natural cut points (``parse_steps``) at which a
  replay method can restart generation from an expert or self-generated prefix;
- difficulty (``level`` = number of terms) is a single knob that the base model's pass
  rate falls off along, which is what makes "hard" prompts exist in quantity.

Answers are computed from the integer terms (never ``eval``) and are exact.
"""
from __future__ import annotations

import hashlib
import random
import re
from typing import Iterable, Sequence

from components.data.schema import Problem

MIN_LEVEL, MAX_LEVEL = 2, 8
PROMPT_PREFIX = "Compute "

_EXPR_RE = re.compile(r"^Compute (\d+(?:[+-]\d+)+)\.$")
_TERM_RE = re.compile(r"[+-]?\d+")
_STEP_RE = re.compile(r"(-?\d+)([+-])(\d+)=(-?\d+)\. ")
_BOXED_RE = re.compile(r"\\boxed\{(-?\d+)\}")


def format_expression(terms: Sequence[int]) -> str:
    """``[42, 59, -77]`` -> ``"42+59-77"``. The first term must be non-negative (no unary minus)."""
    _check_terms(terms)
    return str(terms[0]) + "".join(("+" if t >= 0 else "-") + str(abs(t)) for t in terms[1:])


def format_prompt(terms: Sequence[int]) -> str:
    return f"{PROMPT_PREFIX}{format_expression(terms)}."


def parse_prompt(prompt: str) -> list[int]:
    """Inverse of ``format_prompt``: the signed terms of a synthetic prompt."""
    m = _EXPR_RE.match(prompt.strip())
    if not m:
        raise ValueError(f"not a synthetic arithmetic prompt: {prompt!r}")
    return [int(t) for t in _TERM_RE.findall(m.group(1))]


def evaluate(terms: Sequence[int]) -> int:
    """The exact value of the chain (left to right; +/- only, so order does not matter)."""
    _check_terms(terms)
    return sum(int(t) for t in terms)


def expert_trace(expr_terms: Sequence[int]) -> str:
    """The expert solution: one ``a±b=c. `` step per operation, then ``\\boxed{answer}``.

    Intermediate results may be negative (``42-59=-17. -17+30=13. ``); operands are written
    without sign since the operator carries it.
    """
    _check_terms(expr_terms)
    acc = int(expr_terms[0])
    parts = []
    for t in expr_terms[1:]:
        new = acc + int(t)
        parts.append(f"{acc}{'+' if t >= 0 else '-'}{abs(int(t))}={new}. ")
        acc = new
    return " " + "".join(parts) + f"\\boxed{{{acc}}}"


def parse_steps(trace: str) -> list[int]:
    """Character offsets just after each ``". "`` step separator, in order.

    ``trace[:off]`` for any returned ``off`` is a prefix that ends at a step boundary (the
    model resumes with the next step or with ``\\boxed``). The start (0) and the end of
    the trace are not included. Negative numbers and the prompt's final "." never contain
    ``". "`` so the split is unambiguous.
    """
    return [m.end() for m in re.finditer(r"\. ", trace)]


def check_trace(trace: str, terms: Sequence[int] | None = None) -> bool:
    """True when every step of ``trace`` is arithmetically right, the steps chain (each
    starts from the previous result), the boxed answer is the last result and, when
    ``terms`` are given, the steps follow those terms exactly."""
    body = trace.strip()
    steps = _STEP_RE.findall(body + " ") if body else []
    rebuilt = "".join(f"{a}{op}{b}={c}. " for a, op, b, c in steps)
    boxed = _BOXED_RE.fullmatch(body[len(rebuilt):].strip()) if body.startswith(rebuilt) else None
    if not steps or boxed is None:
        return False
    prev = None
    for a, op, b, c in steps:
        a, b, c = int(a), int(b), int(c)
        if (a + b if op == "+" else a - b) != c or (prev is not None and a != prev):
            return False
        prev = c
    if int(boxed.group(1)) != prev:
        return False
    if terms is not None:
        signed = [int(steps[0][0])] + [int(b) if op == "+" else -int(b) for _, op, b, _ in steps]
        return signed == [int(t) for t in terms]
    return True


def level_counts(n: int, levels: dict[int, float] | Sequence[int]) -> dict[int, int]:
    """How many problems of each level ``generate_problems`` makes: exact largest-remainder
    rounding of ``n * weight`` (so a 35/35/25/5 mix is that mix, not a noisy sample of it)."""
    weights = dict(levels) if isinstance(levels, dict) else {int(lv): 1.0 for lv in levels}
    if not weights:
        raise ValueError("levels is empty")
    for lv, w in weights.items():
        if not (MIN_LEVEL <= int(lv) <= MAX_LEVEL):
            raise ValueError(f"level {lv} out of range [{MIN_LEVEL}, {MAX_LEVEL}]")
        if w < 0:
            raise ValueError(f"level {lv} has a negative weight {w}")
    total = float(sum(weights.values()))
    if total <= 0:
        raise ValueError("level weights sum to zero")
    exact = {int(lv): n * w / total for lv, w in weights.items()}
    counts = {lv: int(x) for lv, x in exact.items()}
    short = n - sum(counts.values())
    # ties broken by level so the result never depends on dict order
    for lv in sorted(exact, key=lambda lv: (-(exact[lv] - counts[lv]), lv))[:short]:
        counts[lv] += 1
    return dict(sorted(counts.items()))


def problem_uid(terms: Sequence[int]) -> str:
    """Content-addressed uid: the same expression gets the same uid in every dataset, so
    train/held-out overlap is detectable by uid alone."""
    expr = format_expression(terms)
    return f"syn-{len(terms)}t-{hashlib.sha1(expr.encode()).hexdigest()[:12]}"


def make_problem(terms: Sequence[int], source: str = "synthetic") -> Problem:
    return Problem(uid=problem_uid(terms), prompt=format_prompt(terms), answer=str(evaluate(terms)),
                   source=source, level=len(terms), traces=(expert_trace(terms),),
                   meta={"terms": [int(t) for t in terms]})


def generate_problems(n: int, levels: dict[int, float] | Sequence[int], seed: int,
                      operand_digits: int = 2, source: str = "synthetic",
                      exclude: Iterable[str] = ()) -> list[Problem]:
    """``n`` distinct problems, deterministic in ``seed``.

    ``levels``: ``{terms: weight}`` or a list of term counts (equal weights); counts per
    level are exact (``level_counts``) and the order is shuffled. Operands have exactly
    ``operand_digits`` digits (1 digit: 1..9); the sign of each later term is a coin flip.
    ``exclude``: uids to avoid (e.g. a training set when drawing a held-out set).
    """
    if operand_digits < 1:
        raise ValueError("operand_digits must be >= 1")
    lo, hi = (1 if operand_digits == 1 else 10 ** (operand_digits - 1)), 10 ** operand_digits - 1
    rng = random.Random(f"synthetic:{seed}:{operand_digits}")
    plan = [lv for lv, c in level_counts(n, levels).items() for _ in range(c)]
    rng.shuffle(plan)
    seen = set(exclude)
    out: list[Problem] = []
    for lv in plan:
        for _attempt in range(1000):
            terms = [rng.randint(lo, hi)] + [rng.choice((1, -1)) * rng.randint(lo, hi) for _ in range(lv - 1)]
            uid = problem_uid(terms)
            if uid not in seen:
                break
        else:
            raise ValueError(f"cannot draw {n} distinct problems of level {lv} with {operand_digits}-digit operands")
        seen.add(uid)
        out.append(make_problem(terms, source))
    return out


def _check_terms(terms: Sequence[int]) -> None:
    if len(terms) < 2:
        raise ValueError(f"need at least 2 terms, got {len(terms)}")
    if int(terms[0]) < 0:
        raise ValueError("the first term must be non-negative")
