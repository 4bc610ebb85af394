"""Grader validation: the Grader against math-verify called directly, on the shipped benchmarks.

Every benchmark gold (after the loader's answer rules) gets a set of generated responses, each a
short completion ending in boxed answer(s):

- ``self``:      the gold boxed as it is;
- ``rewrite``:   equivalent forms: ``27.0``, decimal <-> fraction, a multi-answer gold in reverse
  order, a percentage with ``\\%`` inside or after the box, the file's raw spelling, the
  gold inside ``$...$`` or ``\\[...\\]``, ``x = gold``, a unit after the number, intervals
  and tuples respaced or written with ``\\left( ... \\right)``;
- ``percent``:   the gold written as a percentage (``62.5\\%``) against the bare number;
- ``multi_box``: a multi-part gold with each part in its own box (``\\boxed{1}, \\boxed{3}``);
- ``hedge``:     a one-answer gold boxed beside a wrong answer (``\\boxed{g} or \\boxed{w}``);
- ``neg_int`` / ``neg_other``: a wrong answer (``n+1``; another problem's gold).

Each pair is graded by the Grader and by math-verify the way open-r1's accuracy reward calls it
(:func:`math_verify_reference`). The agreement rate is over all pairs; every disagreement is
printed with its explanation (:data:`CHOICES`: the grader's deliberate rule that gives it), and
one that no rule explains is printed as UNEXPLAINED. ``intended`` is the share graded as the
variant was built to be (correct forms correct, wrong and hedged answers wrong).

    .venv/bin/python tests/support/grader_validation.py [--every 1] [--docs docs/grading.md] [--out misses.json]

``--docs`` rewrites the block between ``<!-- generated:grader_validation -->`` and
``<!-- /generated:grader_validation -->`` in that file with the printed summary.
"""
from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from components.data.benchmarks import split_math_spans, split_top_level, strip_math_delims

KINDS = ("self", "rewrite", "percent", "multi_box", "hedge", "neg_int", "neg_other")
RAW_SPELLING = {"math500", "aime24", "aime25", "amc23", "gaokao2023en"}
_INT = re.compile(r"^-?\d+$")
_DEC = re.compile(r"^-?\d*\.\d+$")
_NUM = re.compile(r"^-?(?:\d+(?:\.\d+)?|\\[dt]?frac\{\d+\}\{\d+\})$")
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
_BRACKETED = re.compile(r"^[(\[].*[)\]]$")
BLOCK = re.compile(r"(<!-- generated:grader_validation -->\n)(.*?)(<!-- /generated:grader_validation -->)", re.S)


@dataclass(frozen=True)
class Case:
    bench: str
    uid: str
    kind: str       # one of KINDS
    gold: str
    response: str   # the model text graded
    expect: bool    # built to be graded correct?
    note: str = ""


def _say(*boxed: str, sep: str = ", ") -> str:
    return "Working through it, the answer is " + sep.join("\\boxed{" + b + "}" for b in boxed) + "."


def _terminating(q: int) -> bool:
    for f in (2, 5):
        while q % f == 0:
            q //= f
    return q == 1


def parts(p) -> list[str]:
    """The parts of a multi-part gold (several answers), else []."""
    answers = p.meta.get("answers")
    raw = p.meta.get("answer_raw")
    if not answers and isinstance(raw, str) and split_math_spans(raw):  # Gaokao "$1$ or $2$"
        answers = split_math_spans(raw)
    if not answers and not _BRACKETED.match(p.answer) and "\\!" not in p.answer:
        answers = split_top_level(p.answer)  # MATH "1,-2", "3, 5, 7"
    return list(answers) if answers and len(answers) > 1 and len(set(answers)) > 1 else []


def rewrites(p) -> list[tuple[str, str]]:
    """(response text, note): equivalent forms of ``p.answer``, to be graded correct."""
    g, out = p.answer, []
    if _INT.match(g):
        out.append((_say(g + ".0"), "integer as float"))
    elif _DEC.match(g):
        fr = Fraction(g)
        if fr.denominator > 1:
            sign = "-" if fr < 0 else ""
            out.append((_say(f"{sign}\\frac{{{abs(fr.numerator)}}}{{{fr.denominator}}}"), "decimal as fraction"))
    elif (m := _FRAC.match(g)) and int(m.group(3)):
        fr = Fraction(int(m.group(2)), int(m.group(3)))
        if fr.denominator > 1 and _terminating(fr.denominator):
            out.append((_say(m.group(1) + str(float(fr))), "fraction as decimal"))
    if ps := parts(p):
        out.append((_say(", ".join(reversed(ps))), "answers in reverse order"))
    if p.meta.get("unit") == "%":
        out.append((_say(g + "\\%"), "percent sign in the box"))
        out.append(("So the answer is $\\boxed{" + g + "}\\%$.", "percent sign after the box"))
    raw = p.meta.get("answer_raw")
    raw = repr(raw) if isinstance(raw, float) else raw
    # the file's own spelling, where a model could plausibly write it inside \boxed{}
    if isinstance(raw, str) and raw != g and p.source in RAW_SPELLING and "%" not in raw \
            and "$" not in strip_math_delims(raw):  # "$x$" yes; "20 $cm^{2}$", "$1$, $2$" no
        out.append((_say(raw), "raw spelling"))
    out.append(("Hence the answer is $\\boxed{" + g + "}$.", "box inside $...$"))
    out.append(("Hence\n\\[\n\\boxed{" + g + "}\n\\]", "box inside \\[...\\]"))
    if _NUM.match(g):
        out.append((_say("x = " + g), "x = gold"))
        out.append(("The length is $\\boxed{" + g + "}$ cm.", "unit after the box"))
        out.append((_say(g + " \\text{ cm}"), "unit in the box"))
    if _BRACKETED.match(g) and "," in g and "\\left" not in g:
        spaced = re.sub(r",\s*", ", ", g)
        out.append((_say(spaced if spaced != g else g.replace(", ", ",")), "respaced"))
        if g[0] == "(" and g[-1] == ")" and g.count("(") == 1:
            out.append((_say("\\left(" + g[1:-1] + "\\right)"), "\\left( ... \\right)"))
    return out


def build_cases(problems_by_bench: dict[str, list], every: int = 1) -> list[Case]:
    """The generated responses for every ``every``-th problem of each benchmark."""
    cases: list[Case] = []
    for bench, problems in problems_by_bench.items():
        golds = [p.answer for p in problems]
        for i, p in enumerate(problems):
            if i % every:
                continue
            g = p.answer
            other = next((golds[(i + k) % len(golds)] for k in range(1, len(golds))
                          if golds[(i + k) % len(golds)].replace(" ", "") != g.replace(" ", "")), None)
            add = lambda kind, resp, expect, note="", gold=g: cases.append(  # noqa: E731
                Case(bench, p.uid, kind, gold, resp, expect, note))
            add("self", _say(g), True)
            for resp, note in rewrites(p):
                add("rewrite", resp, True, note)
            if p.meta.get("unit") == "%":
                add("percent", _say(g), True, "gold with \\%", gold=g + "\\%")
            if ps := parts(p):
                add("multi_box", _say(*ps), True, "one box per part, commas")
                add("multi_box", _say(*ps, sep=" and "), True, "one box per part, 'and'")
            wrong = str(int(g) + 1) if _INT.match(g) else other
            if not parts(p) and wrong is not None:
                add("hedge", _say(g, wrong, sep=" or "), False, "gold first")
                add("hedge", _say(wrong, g, sep=" or "), False, "gold last")
            if _INT.match(g):
                add("neg_int", _say(str(int(g) + 1)), False)
            if other is not None:
                add("neg_other", _say(other), False)
    return cases


# ------------------------------------------------------------------ math-verify, called directly
def math_verify_reference():
    """``(response, gold) -> bool``: open-r1's accuracy reward (``parse`` the whole completion with
    its LaTeX config, ``parse`` the gold, ``verify(gold, answer)``). Our golds are bare answers,
    so the gold is given as a solution ending in ``\\boxed{gold}``; where math-verify gets no
    expression from that (``62.5\\%``), the bare gold text, which it reads as a number. Main
    thread only (math-verify's timeouts use signal.alarm)."""
    import logging
    import warnings

    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse, verify

    from components.reward.worker import _is_expr

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message=".*equations=True.*")
    answer_cfg = [LatexExtractionConfig(
        normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                 equations=True, boxed="all", units=True),
        boxed_match_priority=0, try_extract_without_anchor=False)]
    golds: dict[str, list] = {}

    def grade(response: str, gold: str) -> bool:
        if gold not in golds:
            g = parse("\\boxed{" + gold + "}", extraction_mode="first_match")
            golds[gold] = g if any(_is_expr(x) for x in g) else (parse(gold, extraction_mode="first_match") or g)
        try:
            return bool(verify(golds[gold], parse(response, extraction_config=answer_cfg,
                                                  extraction_mode="first_match")))
        except Exception:  # noqa: BLE001 - open-r1 scores a failed verify as no reward
            return False
    return grade


# ------------------------------------------------------------------ the grader's deliberate choices
# name -> why the grader's verdict differs from math-verify's (called as open-r1 does) and is meant to
CHOICES = {
    "percent in the box": (
        "open-r1's completion config gets no expression from `\\boxed{5.3\\%}`; the grader drops a "
        "trailing `\\%` (math-verify's own reading of `\\boxed{5.3}\\%` and of the gold `5.3\\%`)"),
    "shorthand LaTeX": (
        "open-r1 turns off math-verify's malformed-operator repair for completions, so `\\frac12` gives "
        "no expression; the grader reads both sides with math-verify's defaults, as it reads the gold"),
    "string-only gold": (
        "the gold gives math-verify's LaTeX extractor no expression, so the grader matches its exact "
        "text only (the reference reads the 1 out of `\\{x|-2\\leq x < 1\\}` with its plain-expression "
        "extractor, or compares other strings); a grader that read numbers out of golds would reward "
        "any answer holding them"),
    "gold with its own $": (
        "the gold carries `$` delimiters (or prose around them); the grader parses it as written, "
        "the reference's `\\boxed{gold}` nests the `$` inside a box, which math-verify cannot read"),
    "boxes joined with a comma": (
        "math-verify joins listed boxes with `,`, so `\\boxed{48}, \\boxed{384}` reads as 48384; the "
        "grader joins them with `, ` and grades the set {48, 384}"),
}
_SHORTHAND = re.compile(r"\\[dt]?frac\s*\d|\\[dt]?frac\{[^{}]*\}\s*\d|\\sqrt\s*\d")
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+")


def explain(case: Case, latex_only_parse) -> str | None:
    """The name of the choice in :data:`CHOICES` behind a disagreement, or None."""
    if case.note == "percent sign in the box":
        return "percent in the box"
    if _SHORTHAND.search(case.gold):
        return "shorthand LaTeX"
    if case.kind == "multi_box" and _THOUSANDS.fullmatch(case.gold.replace(" ", "")):
        return "boxes joined with a comma"
    if "$" in case.gold:
        return "gold with its own $"
    if not latex_only_parse(case.gold):
        return "string-only gold"
    return None


def run(cases: list[Case], workers: int, timeout_s: float) -> tuple[list[tuple[Case, str, bool]], float, float]:
    """[(case, grader reason, math-verify verdict)], grader seconds, math-verify seconds."""
    from components.reward.grader import Grader

    t0 = time.perf_counter()
    with Grader(workers=workers, timeout_s=timeout_s) as grader:
        grades = grader.grade_batch([c.response for c in cases], [c.gold for c in cases])
    t1 = time.perf_counter()
    mv = math_verify_reference()
    verdicts = [mv(c.response, c.gold) for c in cases]  # in this (main) thread: signal.alarm
    return [(c, g.reason, v) for c, g, v in zip(cases, grades, verdicts)], t1 - t0, time.perf_counter() - t1


def latex_only_parse():
    """``gold -> bool``: does math-verify's LaTeX extractor alone get an expression from ``\\boxed{gold}``,
    read in the reference's ``first_match`` mode (its first match decides whether the reference falls
    back to the plain-expression extractor)."""
    from math_verify import LatexExtractionConfig, parse

    from components.reward.worker import _is_expr

    cfg = [LatexExtractionConfig(boxed_match_priority=0)]
    return lambda gold: any(_is_expr(x) for x in parse("\\boxed{" + gold + "}", extraction_config=cfg,
                                                        extraction_mode="first_match"))


def summarize(results) -> dict:
    """Agreement and intended rates per kind, and the disagreements with their explanations."""
    parses = latex_only_parse()
    per_kind: dict[str, Counter] = defaultdict(Counter)
    disagreements = []
    for c, reason, mv in results:
        ours = reason == "correct"
        k = per_kind[c.kind]
        k["n"] += 1
        k["agree"] += ours == mv
        k["intended"] += ours == c.expect
        k["mv_intended"] += mv == c.expect
        if ours != mv:
            disagreements.append((c, reason, mv, explain(c, parses)))
    return {"per_kind": per_kind, "disagreements": disagreements,
            "n": sum(k["n"] for k in per_kind.values()), "agree": sum(k["agree"] for k in per_kind.values())}


def report(s: dict, n_golds: int, benches: list[str]) -> str:
    n, agree = s["n"], s["agree"]
    unexplained = [d for d in s["disagreements"] if d[3] is None]
    lines = [f"{n} generated responses for {n_golds} golds of {', '.join(benches)}: "
             f"**agreement with math-verify {agree / n:.4f}** ({agree}/{n}); "
             f"{len(s['disagreements'])} disagreements, {len(unexplained)} not explained by a rule below.", "",
             "| kind | responses | agreement | grader as intended | math-verify as intended |",
             "|---|---|---|---|---|"]
    for kind in KINDS:
        k = s["per_kind"].get(kind)
        if k:
            lines.append(f"| {kind} | {k['n']} | {k['agree'] / k['n']:.4f} | {k['intended'] / k['n']:.4f} | "
                         f"{k['mv_intended'] / k['n']:.4f} |")
    by_rule = Counter((d[3], d[1], d[2]) for d in s["disagreements"])
    lines += ["", "| choice | grader | math-verify | responses | why |", "|---|---|---|---|---|"]
    for (rule, reason, mv), cnt in by_rule.most_common():
        lines.append(f"| {rule or 'UNEXPLAINED'} | {reason} | {'correct' if mv else 'not correct'} | {cnt} | "
                     f"{CHOICES.get(rule, 'no rule of the grader explains it')} |")
    return "\n".join(lines)


def write_block(path: Path, body: str) -> None:
    text = path.read_text()
    if not BLOCK.search(text):
        raise SystemExit(f"{path}: no <!-- generated:grader_validation --> ... "
                         "<!-- /generated:grader_validation --> block")
    path.write_text(BLOCK.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(3), text))


def main(argv: list[str] | None = None) -> int:
    from components.data.benchmarks import BENCHMARKS, load_benchmark

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmarks", nargs="*", default=list(BENCHMARKS))
    ap.add_argument("--every", type=int, default=1, help="use every n-th problem of each benchmark")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--docs", type=Path, default=None, help="write the summary block into this file")
    ap.add_argument("--out", type=Path, default=None, help="write the disagreements as JSON here")
    args = ap.parse_args(argv)
    problems = {b: load_benchmark(b) for b in args.benchmarks}
    cases = build_cases(problems, args.every)
    results, t_grader, t_mv = run(cases, args.workers, args.timeout)
    s = summarize(results)
    n_golds = sum(len(p[::args.every]) for p in problems.values())
    body = report(s, n_golds, args.benchmarks)
    parses = latex_only_parse()
    strings = [f"{b} `{p.answer}`" for b, ps in problems.items() for p in ps[::args.every] if not parses(p.answer)]
    body += (f"\n\nGolds that give math-verify's LaTeX extractor no expression, so that only their exact text "
             f"matches ({len(strings)} of {n_golds}): " + ("; ".join(strings) or "none") + ".")
    cmd = "tests/support/grader_validation.py" + (f" --every {args.every}" if args.every != 1 else "") + (
        " --benchmarks " + " ".join(args.benchmarks) if args.benchmarks != list(BENCHMARKS) else "")
    body += f"\n\nPrinted by `.venv/bin/python {cmd}`.\n"
    print(body)
    print(f"grader {t_grader:.1f} s ({args.workers} workers), math-verify in-process {t_mv:.1f} s\n")
    print(f"disagreements ({len(s['disagreements'])}):")
    for c, reason, mv, why in s["disagreements"]:
        print(f"- {c.bench} {c.uid} [{c.kind}{': ' + c.note if c.note else ''}] gold={c.gold!r} "
              f"response={c.response!r} -> grader {reason}, math-verify {mv}: {why or 'UNEXPLAINED'}")
    if args.out:
        args.out.write_text(json.dumps([{**c.__dict__, "reason": r, "math_verify": mv, "why": w}
                                        for c, r, mv, w in s["disagreements"]], indent=1))
    if args.docs:
        write_block(args.docs, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
