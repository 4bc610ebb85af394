"""Grader validation on the shipped benchmarks: does the grader accept every gold answer?

For every benchmark gold (after the loader's answer rules) the Grader grades:

- ``self``:    ``\\boxed{gold}`` against gold: must be correct;
- ``rewrite``: canonical rewrites that must stay correct: an integer written ``27.0``, a
  terminating fraction written as a decimal and back (``\\frac{1}{2}`` <-> ``0.5``), a
  multi-answer gold in reverse order (a set), a percentage with ``\\%``, and the file's raw
  spelling where the loader changed it (AIME ``023``, AMC ``27.0``, Gaokao ``$x$``, ``58,500``);
- ``neg_int``: integer gold n against ``\\boxed{n+1}``: must be wrong;
- ``neg_other``: gold against another problem's (different) gold of the same benchmark:
  must be wrong.

Run ``python bench/grader_validation.py [--out misses.json]``: prints the rate per benchmark
and kind, then every miss with its grade reason. The test (tests/reward/test_grader_validation.py)
imports ``build_cases`` / ``run_cases`` from here.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from components.data.benchmarks import split_math_spans, strip_math_delims  # noqa: E402

KINDS = ("self", "rewrite", "neg_int", "neg_other")
RAW_SPELLING = {"math500", "aime24", "aime25", "amc23", "gaokao2023en"}
_INT = re.compile(r"^-?\d+$")
_DEC = re.compile(r"^-?\d*\.\d+$")
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")


@dataclass(frozen=True)
class Case:
    bench: str
    uid: str
    kind: str       # one of KINDS
    gold: str
    response: str   # the model text graded (contains \boxed{...})
    expect: bool    # expected "correct"?
    note: str = ""


def _boxed(x: str) -> str:
    return "\\boxed{" + x + "}"


def _terminating(q: int) -> bool:
    for f in (2, 5):
        while q % f == 0:
            q //= f
    return q == 1


def rewrites(p) -> list[tuple[str, str]]:
    """(response text, note) pairs that must be graded correct against ``p.answer``."""
    g, out = p.answer, []
    if _INT.match(g):
        out.append((g + ".0", "integer as float"))
    elif _DEC.match(g):
        fr = Fraction(g)
        if fr.denominator > 1:
            sign = "-" if fr < 0 else ""
            out.append((f"{sign}\\frac{{{abs(fr.numerator)}}}{{{fr.denominator}}}", "decimal as fraction"))
    elif (m := _FRAC.match(g)) and int(m.group(3)):
        fr = Fraction(int(m.group(2)), int(m.group(3)))
        if fr.denominator > 1 and _terminating(fr.denominator):
            out.append((m.group(1) + str(float(fr)), "fraction as decimal"))
    answers = p.meta.get("answers")
    raw = p.meta.get("answer_raw")
    if not answers and isinstance(raw, str) and split_math_spans(raw):  # Gaokao "$1$ or $2$"
        answers = split_math_spans(raw)
    if answers and len(answers) > 1 and len(set(answers)) > 1:
        out.append((", ".join(reversed(answers)), "answers in reverse order"))
    if p.meta.get("unit") == "%":
        out.append((g + "\\%", "percent sign"))
    raw = repr(raw) if isinstance(raw, float) else raw
    # the file's own spelling, where a model could plausibly write it inside \boxed{}
    if isinstance(raw, str) and raw != g and p.source in RAW_SPELLING and "%" not in raw \
            and "$" not in strip_math_delims(raw):  # "$x$" yes; "20 $cm^{2}$", "$1$, $2$" no
        out.append((raw, "raw spelling"))
    return out


def build_cases(problems_by_bench: dict[str, list], neg_other_every: int = 1) -> list[Case]:
    cases: list[Case] = []
    for bench, problems in problems_by_bench.items():
        for p in problems:
            cases.append(Case(bench, p.uid, "self", p.answer, _boxed(p.answer), True))
            for resp, note in rewrites(p):
                cases.append(Case(bench, p.uid, "rewrite", p.answer, _boxed(resp), True, note))
            if _INT.match(p.answer):
                cases.append(Case(bench, p.uid, "neg_int", p.answer, _boxed(str(int(p.answer) + 1)), False))
        # a different gold of the same benchmark: the next problem whose gold differs
        golds = [p.answer for p in problems]
        for i, p in enumerate(problems):
            if i % neg_other_every:
                continue
            other = next((golds[(i + k) % len(golds)] for k in range(1, len(golds))
                          if golds[(i + k) % len(golds)].replace(" ", "") != p.answer.replace(" ", "")), None)
            if other is not None:
                cases.append(Case(bench, p.uid, "neg_other", p.answer, _boxed(other), False))
    return cases


def run_cases(grader, cases: list[Case]) -> list[tuple[Case, str]]:
    grades = grader.grade_batch([c.response for c in cases], [c.gold for c in cases])
    return [(c, g.reason) for c, g in zip(cases, grades)]


def summarize(results: list[tuple[Case, str]]) -> tuple[dict, list[tuple[Case, str]]]:
    """({bench: {kind: (ok, n)}}, misses). ok = graded as expected."""
    table: dict[str, dict[str, list[int]]] = defaultdict(lambda: {k: [0, 0] for k in KINDS})
    misses = []
    for c, reason in results:
        ok = (reason == "correct") == c.expect
        table[c.bench][c.kind][0] += ok
        table[c.bench][c.kind][1] += 1
        if not ok:
            misses.append((c, reason))
    return {b: {k: tuple(v) for k, v in t.items()} for b, t in table.items()}, misses


def string_only_golds(problems) -> list:
    """Golds that math-verify parses to no sympy expression (they match only as strings).
    Parsed here in the main thread (math-verify's timeouts use signal.alarm)."""
    import logging

    from components.reward.grader import _is_expr, _parse

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return [p for p in problems if not any(_is_expr(x) for x in _parse("\\boxed{" + p.answer + "}", 5))]


def format_table(table: dict, n_by_bench: dict[str, int], n_expr: dict[str, int]) -> str:
    lines = ["| benchmark | golds | parsed as expression | self | rewrite | neg_int (wrong) | "
             "neg_other (wrong) |", "|---|---|---|---|---|---|---|"]
    tot = {k: [0, 0] for k in KINDS}
    for b, t in table.items():
        cells = []
        for k in KINDS:
            ok, n = t[k]
            tot[k][0] += ok
            tot[k][1] += n
            cells.append(f"{ok / n:.3f} ({ok}/{n})" if n else "-")
        expr = n_expr[b] / n_by_bench[b]
        lines.append(f"| {b} | {n_by_bench[b]} | {expr:.3f} | " + " | ".join(cells) + " |")
    n_all = sum(n_by_bench.values())
    lines.append(f"| all | {n_all} | {sum(n_expr.values()) / n_all:.3f} | " + " | ".join(
        f"{ok / n:.3f} ({ok}/{n})" if n else "-" for ok, n in tot.values()) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from components.data.benchmarks import BENCHMARKS, load_benchmark
    from components.reward.grader import Grader

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmarks", nargs="*", default=list(BENCHMARKS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=None, help="write the misses as JSON here")
    args = ap.parse_args(argv)
    problems = {b: load_benchmark(b) for b in args.benchmarks}
    cases = build_cases(problems)
    t0 = time.perf_counter()
    with Grader(workers=args.workers, timeout_s=args.timeout) as grader:
        results = run_cases(grader, cases)
        stats = dict(grader.stats)
    dt = time.perf_counter() - t0
    table, misses = summarize(results)
    strings = {b: string_only_golds(p) for b, p in problems.items()}
    print(format_table(table, {b: len(p) for b, p in problems.items()},
                       {b: len(p) - len(strings[b]) for b, p in problems.items()}))
    print(f"\n{len(cases)} graded pairs in {dt:.1f} s with {args.workers} workers "
          f"(worker items {stats['worker_items']}, hard timeouts {stats['timeouts']})\n")
    print(f"misses ({len(misses)}):")
    for c, reason in misses:
        print(f"- {c.bench} {c.uid} [{c.kind}{': ' + c.note if c.note else ''}] gold={c.gold!r} "
              f"response={c.response!r} -> {reason}")
    print("\ngolds compared as strings only (no sympy expression):")
    for b, ps in strings.items():
        for p in ps:
            print(f"- {b} {p.uid}: {p.answer!r}")
    if args.out:
        args.out.write_text(json.dumps([{**c.__dict__, "reason": r} for c, r in misses], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
