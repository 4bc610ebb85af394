"""The evaluation benchmarks, shipped under ``data/benchmarks/<name>/`` (see ``data/NOTICE``),
loaded into the canonical :class:`Problem` with one answer rule per source.

``load_benchmark(name)`` reads the shipped file; ``source="hf"`` reads the Hugging Face dataset
of the same name instead (needs the network; not exercised by the tests). Answer rules:

- math500: ``answer`` as is; uid = MATH ``unique_id`` (so it can be checked against MATH train).
- aime24 / aime25: answers are strings, zero-padded in the aime24 copy: ``"023" -> "23"``.
- amc23: answers are floats: ``27.0 -> "27"``.
- minerva_math: no answer field: the last ``\\boxed{}`` of ``solution`` (``extract_boxed``).
- olympiadbench: ``final_answer`` is a list; multi-answer rows (``is_multiple_answer``, 94)
  hold several answers in one string (``"$69$,$84$"``, ``"1,3,5"``, ``"$(1,2),(3,4)$"``): they
  are split, ``$`` removed, and joined with ``", "`` (a set math-verify compares in any order);
  the list is kept in ``meta["answers"]``. ``unit``/``error`` (tolerance) go to meta.
- gaokao2023en: answers wrapped in ``$...$`` are unwrapped; several spans joined by commas or
  "or" (``"$2$ or $-2$"``) become ``"2, -2"``; two rows with an empty answer have it at the
  end of the question ("...point.answers: $\\frac{3}{10}$"): moved out of the prompt.
- all (:func:`canonical_gold`): thousands separators removed (``"58,500" -> "58500"``, 6 rows;
  math-verify reads ``58,500`` as 58500 but ``58, 500`` as a set, hence the ``", "`` joins);
  percentages ``"62.5%"``, ``"1.1\\%"`` -> the number (5 rows: math-verify parses no gold
  with a percent sign, so they matched only as exact strings); Minerva's numpy spellings
  ``"-1./3"``, ``"np.arcsin(10/13)"`` -> ``"-1/3"``, ``"\\arcsin(10/13)"`` (3 rows).

Every benchmark keeps the raw answer in ``meta["answer_raw"]`` when the rule changed it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from pydantic import AliasChoices, BeforeValidator, Field, model_validator

from components.data import arith_benchmark
from components.data.loaders import LoadReport, OnError, Problems, collect, iter_rows, source_rows
from components.data.schema import (AnswerText, DataError, OptionalAnswerText, Problem, Row, answer_text, null_as,
                                    validate_row)
from components.error_text import FieldError

__all__ = ["BENCHMARKS", "GENERATED", "BenchmarkSpec", "benchmark_names", "load_benchmark", "benchmark_root", "strip_math_delims",
           "split_math_spans", "split_top_level", "olympiad_answers", "canonical_gold"]

DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "data" / "benchmarks"
ROOT_ENV = "RLVR_BENCHMARK_ROOT"


# ------------------------------------------------------------------ answer text rules
_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def strip_math_delims(s: str) -> str:
    """``"$\\frac{1}{2}$" -> "\\frac{1}{2}"`` (also ``$$..$$``, ``\\(..\\)``, ``\\[..\\]``) when the
    whole string is ONE math span; a lone leading or trailing ``$`` is dropped too. Strings
    with several ``$`` spans are returned unchanged (see :func:`split_math_spans`)."""
    s = s.strip()
    for left, right in _DELIMS:
        if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
            inner = s[len(left):len(s) - len(right)]
            if "$" not in inner and (left[0] != "\\" or right not in inner):
                return inner.strip()
    if s.count("$") == 1 and (s.startswith("$") or s.endswith("$")):
        return s.strip("$").strip()
    return s


_SPAN = re.compile(r"\$([^$]+)\$")
_SEPARATOR_TEXT = re.compile(r"^(?:\s|,|，|;|；|\bor\b|\band\b)*$")


def split_math_spans(s: str) -> list[str] | None:
    """``"$48$, $384$" -> ["48", "384"]``, ``"$2$ or $-2$" -> ["2", "-2"]``: several ``$`` spans
    separated only by commas, semicolons, "or", "and". None for anything else."""
    text = s.strip()
    spans = list(_SPAN.finditer(text))
    if len(spans) < 2:
        return None
    pos = 0
    for m in spans:
        if not _SEPARATOR_TEXT.match(text[pos:m.start()]):
            return None
        pos = m.end()
    return [m.group(1).strip() for m in spans] if _SEPARATOR_TEXT.match(text[pos:]) else None


def split_top_level(s: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets: ``"(1,2), (3,4)" -> ["(1,2)", "(3,4)"]`` (a half-open
    interval such as ``[2,3)`` counts as one bracket pair)."""
    parts, depth, cur = [], 0, []
    for ch in s:
        depth += ch in "([{"
        depth = max(0, depth - (ch in ")]}"))
        if ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return [p for p in parts if p]


_PROSE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{4,}")  # a word that is not a LaTeX command


def olympiad_answers(final_answer: list[str], multiple: bool) -> list[str]:
    """The individual answers of an OlympiadBench row (see the module doc)."""
    out: list[str] = []
    for s in final_answer:
        spans = split_math_spans(s)
        if spans is not None:
            out += [a for sp in spans for a in (split_top_level(sp) if multiple else [sp])]
        elif multiple and s.count("$") <= 2:
            out += split_top_level(strip_math_delims(s))
        elif multiple and not _PROSE.search(s.replace("$", " ")):  # stray "$": "$221,$8$"
            out += split_top_level(s.replace("$", ""))
        else:  # prose ("$f(x)=ax+b$, where $b$ is ..."): kept whole
            out.append(strip_math_delims(s))
    return [a for a in out if a]


_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_TRAILING_JUNK = re.compile(r"\s*solution\s*:?\s*$", re.I)
_NUMBER_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*\$\s*(?:\\mathrm\{)?[a-zA-Z]+(?:\^\{?\d\}?)?\}?\s*\$$")
_PERCENT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*\\?%$")
_NUMPY_FLOAT = re.compile(r"(\d)\.(?=\s*/)")
_NUMPY_FUNC = re.compile(r"\bnp\.(?=(?:arc)?(?:sin|cos|tan)h?\(|exp\(|log\(|sqrt\()")


def canonical_gold(answer: str) -> tuple[str, dict]:
    """Gold spellings math-verify cannot parse, rewritten (with the meta they imply):
    ``"58,500" -> "58500"``, ``"62.5%"``/``"8 \\%" -> "62.5"``/``"8"`` (unit "%"; a model's
    ``62.5\\%`` is still graded correct), numpy-style ``"-1./3" -> "-1/3"`` and
    ``"np.arcsin(x)" -> "\\arcsin(x)"`` (Minerva)."""
    if _THOUSANDS.match(answer):
        return answer.replace(",", ""), {}
    if m := _PERCENT.match(answer):
        return m.group(1), {"unit": "%"}
    return _NUMPY_FUNC.sub("\\\\", _NUMPY_FLOAT.sub(r"\1", answer)), {}


_ZERO_PADDED = re.compile(r"^0+(\d+)$")


# ------------------------------------------------------------------ per-benchmark rows and converters
# The problem text is ``problem`` or ``question`` depending on the copy of a benchmark.
_PROBLEM = Field(validation_alias=AliasChoices("problem", "question"))


def _uid(name: str, row: dict, i: int, keys: tuple[str, ...] = ("id",)) -> str:
    for k in keys:
        v = row.get(k)
        if v is not None and not isinstance(v, (bool, dict, list)):
            return f"{name}/{v}"
    return f"{name}/{i}"


class Math500Row(Row):
    unique_id: str
    problem: str
    answer: AnswerText
    level: int | None = None


def _math500(row: dict, where: str, i: int, name: str) -> Problem:
    r = validate_row(Math500Row, row, where)
    return Problem(uid=r.unique_id, prompt=r.problem, answer=r.answer, source=name, level=r.level,
                   meta={"subject": row.get("subject") or "", "unique_id": r.unique_id})


class AnswerRow(Row):
    problem: str = _PROBLEM
    answer: AnswerText


def _aime(row: dict, where: str, i: int, name: str) -> Problem:
    r = validate_row(AnswerRow, row, where)
    m = _ZERO_PADDED.match(r.answer)
    meta = {"answer_raw": r.answer} if m else {}
    return Problem(uid=_uid(name, row, i), prompt=r.problem, answer=m.group(1) if m else r.answer, source=name,
                   meta=meta)


def _amc(row: dict, where: str, i: int, name: str) -> Problem:
    r = validate_row(AnswerRow, row, where)
    raw = row["answer"]
    meta = {"answer_raw": raw} if not isinstance(raw, str) or raw != r.answer else {}
    return Problem(uid=_uid(name, row, i), prompt=r.problem, answer=r.answer, source=name, meta=meta)


class MinervaRow(Row):
    problem: str
    answer: OptionalAnswerText = None
    solution: str | None = None             # without an answer field: its last \boxed{} is the answer

    @model_validator(mode="after")
    def _some_answer(self) -> "MinervaRow":
        if self.answer is None and self.solution is None:
            raise FieldError("solution", "required field is missing (the row has no answer field)")
        return self


def _minerva(row: dict, where: str, i: int, name: str) -> Problem:
    from components.reward.grader import extract_boxed

    r = validate_row(MinervaRow, row, where)
    answer = r.answer if r.answer is not None else (extract_boxed(r.solution) or "").strip()
    if not answer:
        raise DataError(f"{where}: solution: no \\boxed{{}} in it, and the row has no answer field")
    return Problem(uid=_uid(name, row, i, ("idx", "id")), prompt=r.problem, answer=answer, source=name,
                   meta={"type": row.get("type") or ""})


def _answer_list(v: Any) -> list[str]:
    v = [v] if isinstance(v, str) else v
    if not isinstance(v, list) or not v or not all(isinstance(a, str) for a in v):
        raise ValueError("must be a non-empty list of strings")
    return v


class OlympiadRow(Row):
    final_answer: Annotated[list[str], BeforeValidator(_answer_list)]
    is_multiple_answer: Annotated[bool, null_as(False)] = False
    question: str
    context: Annotated[str, null_as("")] = ""


def _olympiad(row: dict, where: str, i: int, name: str) -> Problem:
    r = validate_row(OlympiadRow, row, where)
    canon = [canonical_gold(a) for a in olympiad_answers(r.final_answer, r.is_multiple_answer)]
    answers = [a for a, _ in canon]
    if not answers:
        raise DataError(f"{where}: final_answer: is empty")
    meta = {"answers": answers, "answer_raw": r.final_answer, "is_multiple_answer": r.is_multiple_answer,
            "answer_type": row.get("answer_type") or "",
            "unit": "%" if any(extra for _, extra in canon) else row.get("unit"),
            "tolerance": row.get("error"), "subfield": row.get("subfield") or ""}
    return Problem(uid=_uid(name, row, i), prompt=f"{r.context}\n{r.question}" if r.context else r.question,
                   answer=", ".join(answers), source=name, meta=meta)


_LEAKED_ANSWER = re.compile(r"\s*\banswers?:\s*(\S.*?)\s*$", re.I | re.S)


def _answer_or_blank(v: Any) -> str:
    return "" if isinstance(v, str) and not v.strip() else answer_text(v)


class GaokaoRow(Row):
    problem: str = Field(validation_alias=AliasChoices("question", "problem"))
    answer: Annotated[str, BeforeValidator(_answer_or_blank)]
    answer_from_question: bool = False

    @model_validator(mode="after")
    def _leaked_answer(self) -> "GaokaoRow":
        """2 rows have an empty answer and the answer appended to the question ("...point.answers:
        $x$"): it is moved out of the prompt."""
        if not self.answer:
            if not (m := _LEAKED_ANSWER.search(self.problem)):
                raise FieldError("answer", "is empty")
            self.answer, self.problem, self.answer_from_question = m.group(1), self.problem[:m.start()], True
        return self


def _gaokao(row: dict, where: str, i: int, name: str) -> Problem:
    r = validate_row(GaokaoRow, row, where)
    meta = {"source": row.get("source") or "", "id": row.get("id")}
    if r.answer_from_question:
        meta["answer_from_question"] = True
    raw = r.answer
    text = _TRAILING_JUNK.sub("", raw)                    # "$145$solution:" (1 row)
    if (m := _NUMBER_UNIT.match(text)):                  # "20 $cm^{2}$" (1 row): unit dropped
        text, meta["unit"] = m.group(1), text[m.end(1):].strip()
    spans = split_math_spans(text)
    answer = ", ".join(spans) if spans else strip_math_delims(text)
    if not answer:
        raise DataError(f"{where}: answer: is empty")
    return Problem(uid=f"{name}/{i}", prompt=r.problem, answer=answer, source=name,
                   meta={"answer_raw": raw, **meta})


# ------------------------------------------------------------------ registry
@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    convert: Callable[[dict, str, int, str], Problem]
    hf: tuple[str, str | None, str]        # (dataset name, config, split): best known, untested
    alt_files: tuple[str, ...] = ()        # other shipped copies (``load_benchmark``'s ``file``)
    file: str = "test.jsonl"               # default file under <root>/<name>/


BENCHMARKS: dict[str, BenchmarkSpec] = {s.name: s for s in (
    BenchmarkSpec("math500", _math500, ("HuggingFaceH4/MATH-500", None, "test")),
    BenchmarkSpec("aime24", _aime, ("HuggingFaceH4/aime_2024", None, "train")),
    BenchmarkSpec("aime25", _aime, ("math-ai/aime25", None, "test"), ("aime25_matharena.jsonl",)),
    BenchmarkSpec("amc23", _amc, ("math-ai/amc23", None, "test")),
    BenchmarkSpec("minerva_math", _minerva, ("math-ai/minervamath", None, "test"), ("test_with_answer.jsonl",)),
    BenchmarkSpec("olympiadbench", _olympiad, ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train")),
    BenchmarkSpec("gaokao2023en", _gaokao, ("MARIO-Math-Reasoning/Gaokao2023-Math-En", None, "train")),
)}


# benchmarks drawn from a pinned generator spec instead of read from a file (name -> loader);
# ``arith_levels`` is the embedded task's unfiltered benchmark (components.data.arith_benchmark)
GENERATED: dict[str, Callable[[], list[Problem]]] = {arith_benchmark.NAME: arith_benchmark.load}


def benchmark_names() -> list[str]:
    """Every name ``load_benchmark`` accepts: the shipped files' and the generated ones."""
    return sorted([*BENCHMARKS, *GENERATED])


def benchmark_root(root: str | Path | None = None) -> Path:
    """``root``, else ``$RLVR_BENCHMARK_ROOT``, else the repository's ``data/benchmarks``."""
    return Path(root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def load_benchmark(name: str, root: str | Path | None = None, *, file: str | None = None,
                   source: Literal["local", "hf"] = "local", hf_name: str | None = None,
                   on_error: OnError = "raise", limit: int | None = None) -> Problems:
    """The problems of benchmark ``name`` (one of :data:`BENCHMARKS`) with gold answers
    normalised by the benchmark's rule. ``file`` picks another shipped copy (e.g.
    ``aime25_matharena.jsonl``); ``source="hf"`` reads the Hugging Face dataset (``hf_name``
    overrides the default name). Returns a list with ``.report`` (see ``loaders.LoadReport``).
    A :data:`GENERATED` benchmark is drawn (and its digest checked) whatever the other arguments."""
    if name in GENERATED:
        return Problems(GENERATED[name](), LoadReport(f"{name} (generated)"))
    if name not in BENCHMARKS:
        raise KeyError(f"unknown benchmark '{name}' (known: {', '.join(benchmark_names())})")
    spec = BENCHMARKS[name]
    if source == "hf":
        hf_id, config, split = spec.hf
        rows, where = source_rows(hf_name or hf_id, config, split), hf_name or hf_id
    elif source == "local":
        path = benchmark_root(root) / name / (file or spec.file)
        rows, where = iter_rows(path), str(path)
    else:
        raise ValueError(f"source must be 'local' or 'hf', got {source!r}")

    def convert(row: dict, w: str, i: int) -> Problem:
        p = spec.convert(row, w, i, name)
        answer, extra = canonical_gold(p.answer)
        if answer == p.answer or "answers" in p.meta:  # OlympiadBench: done per answer
            return p
        return replace(p, answer=answer, meta={**p.meta, **extra,
                                               "answer_raw": p.meta.get("answer_raw", p.answer)})

    return collect(rows, convert, report=LoadReport(where), on_error=on_error, limit=limit)
