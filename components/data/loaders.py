"""Loaders for real math datasets, all returning the canonical :class:`Problem`:
:func:`load_openr1` (OpenR1-Math-220k: file, directory or Hugging Face name), :func:`load_math`
(MATH train/test), :func:`load_dapo17k` (DAPO-Math-17k); the benchmarks are in
:mod:`components.data.benchmarks`.

Each source format's rows are validated by a pydantic model (``MathRow``, ``DapoRow``,
``OpenR1Row``; field types in :mod:`components.data.schema`). Malformed rows raise
:class:`DataError` with a one-line message naming file, line and field
(``data/x.jsonl:17: answer: required field is missing``; for parquet the number is the
1-based row).
With ``on_error="skip"`` they are skipped and counted instead: every loader returns a
:class:`Problems` list whose ``.report`` (:class:`LoadReport`) holds the counts and messages.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, Iterable, Iterator, Literal

from pydantic import AfterValidator, BeforeValidator, model_validator

from components.data.schema import (AnswerText, DataError, LevelNumber, OptionalAnswerText, Problem, Row,
                                    null_as, numbered_lines, parse_json_line, validate_row)
from components.error_text import FieldError

__all__ = ["LoadReport", "Problems", "LOADERS", "load_openr1", "load_math", "load_dapo17k", "iter_rows",
           "source_rows", "collect", "strip_dapo_boilerplate"]

OnError = Literal["raise", "skip"]
MAX_KEPT_ERRORS = 100


@dataclass
class LoadReport:
    """What one load did. ``rows`` = loaded + skipped + filtered + duplicates + conflicts
    (+ rows not read because ``limit`` was reached, which are not counted at all)."""
    source: str
    rows: int = 0          # rows read (non-blank lines, parquet/HF rows)
    loaded: int = 0        # problems returned
    skipped: int = 0       # malformed rows skipped (on_error="skip")
    filtered: int = 0      # well-formed rows a rule dropped (unverifiable answer, too few traces)
    duplicates: int = 0    # identical problems dropped (DAPO: first copy kept)
    conflicts: int = 0     # copies of a problem whose golds disagree, all dropped (DAPO)
    repaired: int = 0      # rows whose text was repaired (DAPO: "\x0crac" -> "\\frac")
    errors: list[str] = field(default_factory=list)  # messages of skipped rows (first 100)


class Problems(list):
    """``list[Problem]`` with the :class:`LoadReport` of the load as ``.report``."""

    def __init__(self, items: Iterable[Problem] = (), report: LoadReport | None = None):
        super().__init__(items)
        self.report = report or LoadReport(source="")


# ------------------------------------------------------------------ reading rows
def iter_rows(path: str | Path) -> Iterator[tuple[str, Any]]:
    """Yield ``(where, row)`` for a ``.jsonl``/``.json`` file (one object per line) or a
    ``.parquet`` file. A broken line yields a :class:`DataError` as its row (so that the
    caller decides whether to raise or skip); a missing file raises at once."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        n = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                n += 1
                yield f"{path}:{n}", row
        return
    if path.suffix.lower() not in (".jsonl", ".json", ".ndjson"):
        raise DataError(f"{path}: unsupported file type (expected .jsonl or .parquet)")
    for where, line in numbered_lines(path):
        try:
            row = parse_json_line(line, where)
        except DataError as e:
            yield where, e
            continue
        yield where, row if isinstance(row, dict) else DataError(
            f"{where}: expected a JSON object, got {type(row).__name__}")


def collect(rows: Iterable[tuple[str, Any]], convert: Callable[[dict, str, int], Problem | None], *,
            report: LoadReport, on_error: OnError = "raise", limit: int | None = None) -> Problems:
    """Convert rows (``convert(row, where, index)``; None = filtered out), check uid
    uniqueness, and raise or skip-and-count malformed rows."""
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    out = Problems(report=report)
    seen: dict[str, str] = {}
    for i, (where, row) in enumerate(rows):
        if limit is not None and len(out) >= limit:
            break
        report.rows += 1
        try:
            if isinstance(row, DataError):
                raise row
            p = convert(row, where, i)
            if p is not None and p.uid in seen:
                raise DataError(f"{where}: duplicate uid '{p.uid}' (first at {seen[p.uid]})")
        except DataError as e:
            if on_error == "raise":
                raise
            report.skipped += 1
            if len(report.errors) < MAX_KEPT_ERRORS:
                report.errors.append(str(e))
            continue
        if p is None:
            report.filtered += 1
            continue
        tail = where.rsplit(":", 1)[-1]
        seen[p.uid] = f"line {tail}" if tail.isdigit() else where
        out.append(p)
    report.loaded = len(out)
    return out


def _hash_uid(prefix: str, text: str) -> str:
    return f"{prefix}/h{hashlib.sha1(text.encode('utf-8')).hexdigest()[:16]}"


# ------------------------------------------------------------------ MATH
def load_math(path: str | Path, *, on_error: OnError = "raise", limit: int | None = None,
              source: str = "math", answer_from_solution: bool = False) -> Problems:
    """MATH (Hendrycks et al.) in the PRM800K-style JSONL: ``problem``, ``solution``, ``answer``,
    ``level`` (3 or "Level 3"; falls back to ``level_raw``; "Level ?" -> None), ``subject``,
    ``unique_id`` (the uid; a hash of the problem when absent). The reference solution is kept
    as the problem's expert trace when it contains a ``\\boxed{}``. ``answer_from_solution``:
    rows without ``answer`` (the original MATH json) take the solution's last ``\\boxed{}``.
    ``path``: a file, a directory of files or a hub dataset name (:func:`source_rows`)."""
    from components.reward.grader import extract_boxed

    model = MathRowAnswerInSolution if answer_from_solution else MathRow

    def convert(row: dict, where: str, i: int) -> Problem:
        r = validate_row(model, row, where)
        answer = r.answer
        if answer is None and not (answer := (extract_boxed(r.solution) or "").strip()):
            raise DataError(f"{where}: answer: required field is missing (and no \\boxed{{}} in 'solution')")
        uid = r.unique_id or _hash_uid(source, r.problem)
        return Problem(uid=uid, prompt=r.problem, answer=answer, source=source,
                       level=r.level if r.level is not None else r.level_raw,
                       traces=(r.solution,) if extract_boxed(r.solution) is not None else (),
                       meta={"subject": r.subject, "unique_id": uid})

    return collect(source_rows(path), convert, report=LoadReport(str(path)), on_error=on_error, limit=limit)


class MathRow(Row):
    problem: str
    solution: Annotated[str, null_as("")] = ""
    answer: AnswerText
    level: LevelNumber = None
    level_raw: LevelNumber = None           # some copies keep the original "Level 3" here
    subject: Annotated[str, null_as("")] = ""
    unique_id: str | None = None


class MathRowAnswerInSolution(MathRow):
    """The original MATH json: no ``answer``; the solution's last ``\\boxed{}`` is the answer."""
    answer: OptionalAnswerText = None


# ------------------------------------------------------------------ DAPO-Math-17k
_DAPO_PREFIX = re.compile(
    r"^\s*Solve the following math problem step by step\. The last line of your response should be of "
    r"the form Answer: \$Answer \(without quotes\) where \$Answer is the answer to the problem\.\s*")
_DAPO_SUFFIX = re.compile(r"\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")
_DAPO_SUFFIX_ZH = re.compile(r"\s*让我们一步一步地思考。请以“Answer: \\boxed\{<final_answer>\}”"
                             r"的格式输出最终答案。.*$", re.S)
_FORMFEED_FRAC = re.compile("\x0c(?=rac\\b|rac\\{)")  # "\frac" read through a JSON "\f" escape


def strip_dapo_boilerplate(text: str) -> str:
    """The problem statement of a DAPO prompt: the English instruction prefix/suffix of the
    original release and the Chinese answer-format suffix removed, when present."""
    return _DAPO_SUFFIX_ZH.sub("", _DAPO_SUFFIX.sub("", _DAPO_PREFIX.sub("", text))).strip()


def _user_text(v: Any) -> str:
    """The prompt of a DAPO row: a string, or the last user message of a chat list."""
    if isinstance(v, str):
        return v
    if not isinstance(v, list):
        raise ValueError(f"must be a list of chat messages or a string, got {type(v).__name__}")
    users = [m for m in v if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1].get("content"), str):
        raise ValueError("has no user message with string content")
    return users[-1]["content"]


def _problem_left(text: str) -> str:
    if not strip_dapo_boilerplate(_FORMFEED_FRAC.sub(r"\\f", text)):
        raise ValueError("is empty (once the instruction boilerplate is removed)")
    return text


def _index(v: Any) -> int | str | None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
        raise ValueError(f"must be an integer or a string, got {type(v).__name__}")
    return v


class _RewardModel(Row):
    ground_truth: AnswerText


class _ExtraInfo(Row):
    index: Annotated[int | str | None, BeforeValidator(_index)] = None


class DapoRow(Row):
    prompt: Annotated[str, BeforeValidator(_user_text), AfterValidator(_problem_left)]
    reward_model: _RewardModel
    extra_info: Annotated[_ExtraInfo, null_as({})] = _ExtraInfo()


def load_dapo17k(path: str | Path, *, on_error: OnError = "raise", limit: int | None = None,
                 source: str = "dapo17k", dedupe: bool = True) -> Problems:
    """DAPO-Math-17k in the verl layout: ``prompt`` (chat list; the user message's content,
    boilerplate stripped), ``reward_model.ground_truth`` (gold), ``extra_info.index`` (uid
    ``dapo17k/<index>``; a hash of the problem when absent). ``"\\x0crac"`` (a ``\\frac`` that
    was read as a form feed upstream) is repaired. With ``dedupe``, identical problems keep
    their first copy; problems whose copies disagree on the gold are dropped altogether.
    ``path``: a file, a directory of files or a hub dataset name (:func:`source_rows`)."""

    def convert(row: dict, where: str, i: int) -> Problem:
        r = validate_row(DapoRow, row, where)
        fixed = _FORMFEED_FRAC.sub(r"\\f", r.prompt)
        index = r.extra_info.index
        uid = f"{source}/{index}" if index is not None else _hash_uid(source, strip_dapo_boilerplate(fixed))
        meta = {"index": index, "data_source": row.get("data_source", ""), "repaired": fixed != r.prompt}
        return Problem(uid=uid, prompt=strip_dapo_boilerplate(fixed), answer=r.reward_model.ground_truth,
                       source=source, meta=meta)

    report = LoadReport(str(path))
    rows = collect(source_rows(path), convert, report=report, on_error=on_error,
                   limit=None if dedupe else limit)
    report.repaired = sum(bool(p.meta.get("repaired")) for p in rows)
    if not dedupe:
        return rows
    golds: dict[str, set[str]] = {}
    for p in rows:
        golds.setdefault(p.prompt, set()).add(p.answer)
    out, seen = Problems(report=report), set()
    for p in rows:
        if len(golds[p.prompt]) > 1:
            report.conflicts += 1
        elif p.prompt in seen:
            report.duplicates += 1
        elif limit is None or len(out) < limit:
            seen.add(p.prompt)
            out.append(p)
    report.loaded = len(out)
    return out


# ------------------------------------------------------------------ OpenR1-Math-220k
OPENR1_UNVERIFIABLE = frozenset({"", "proof", "notfound", "none"})


def source_rows(path_or_name: str | Path, config: str | None = None, split: str = "train"
                ) -> Iterator[tuple[str, Any]]:
    """Rows of a dataset given as a .jsonl/.parquet file, a directory of them (an HF
    snapshot: ``<dir>/<config>/``, or ``<dir>/data/`` for "default"), or a Hugging Face
    dataset name (``datasets.load_dataset``: needs the network or the local HF cache)."""
    p = Path(path_or_name)
    if p.is_file():
        yield from iter_rows(p)
        return
    if p.is_dir():
        subdirs = (p / config if config else None, p / "data" if config in (None, "default") else None)
        base = next((d for d in subdirs if d is not None and d.is_dir()), p)
        files = sorted(f for f in base.rglob("*") if f.suffix in (".parquet", ".jsonl"))
        if not files:
            raise DataError(f"{base}: no .parquet or .jsonl files")
        for f in files:
            yield from iter_rows(f)
        return
    if p.suffix in (".parquet", ".jsonl", ".json") or str(path_or_name).startswith((".", "/", "~")):
        raise DataError(f"{p}: no such data file")
    import datasets  # a Hugging Face dataset name (needs the network or a local HF cache)

    try:
        ds = datasets.load_dataset(str(path_or_name), config, split=split)
    except Exception as e:  # noqa: BLE001 - offline / unknown name / auth: one line, not a traceback
        raise DataError(f"{path_or_name}: cannot load the dataset ({' '.join(str(e).split())[:200]})") from None
    for i, row in enumerate(ds, 1):
        yield f"{path_or_name}[{config or 'default'}/{split}]:{i}", row


class OpenR1Row(Row):
    PER_GENERATION: ClassVar[tuple[str, ...]] = ("correctness_math_verify", "is_reasoning_complete", "finish_reasons")
    problem: str
    answer: AnswerText
    uuid: str | None = None
    generations: Annotated[list[str], null_as([])] = []
    correctness_math_verify: list[Any] | None = None
    is_reasoning_complete: list[Any] | None = None
    finish_reasons: list[Any] | None = None

    @model_validator(mode="after")
    def _one_entry_per_generation(self) -> "OpenR1Row":
        for key in self.PER_GENERATION:
            v = getattr(self, key)
            if v and len(v) != len(self.generations):
                raise FieldError(key, f"has {len(v)} entries for {len(self.generations)} generations")
        return self


def load_openr1(path_or_name: str | Path, config: str = "default", limit: int | None = None, *,
                split: str = "train", on_error: OnError = "raise", source: str = "openr1",
                min_traces: int = 0, drop_unverifiable: bool = True) -> Problems:
    """OpenR1-Math-220k (public schema: problem, solution, answer, problem_type, question_type,
    source, uuid, is_reasoning_complete, generations, correctness_math_verify, correctness_llama,
    finish_reasons, correctness_count, messages). ``path_or_name``: a .parquet/.jsonl file, a
    directory of them (an HF snapshot: ``<dir>/<config>/``, or ``<dir>/data/`` for "default"),
    or a Hugging Face name ("open-r1/OpenR1-Math-220k", read with ``datasets.load_dataset``).
    ``traces`` = generations[i] with correctness_math_verify[i] AND is_reasoning_complete[i]
    AND finish_reasons[i] == "stop", in order. Rows with fewer than ``min_traces`` traces and
    (with ``drop_unverifiable``) rows whose answer is "proof"/"notfound"/empty are filtered
    (``report.filtered``). uid = ``uuid``; meta keeps uuid, source, problem_type,
    question_type, correctness_count, n_generations."""

    def convert(row: dict, where: str, i: int) -> Problem | None:
        raw = row.get("answer")
        if drop_unverifiable and (raw is None or str(raw).strip().lower() in OPENR1_UNVERIFIABLE):
            return None
        r = validate_row(OpenR1Row, row, where)
        gens = r.generations
        cols = [getattr(r, key) or [None] * len(gens) for key in OpenR1Row.PER_GENERATION]
        traces = tuple(g for g, ok, done, fin in zip(gens, *cols)
                       if ok is True and done is True and fin == "stop")
        if len(traces) < min_traces:
            return None
        uid = r.uuid or _hash_uid(source, r.problem)
        meta = {"uuid": uid, "source": row.get("source") or "", "problem_type": row.get("problem_type") or "",
                "question_type": row.get("question_type") or "", "n_generations": len(gens),
                "correctness_count": row.get("correctness_count")}
        return Problem(uid=uid, prompt=r.problem, answer=r.answer, source=source, traces=traces, meta=meta)

    return collect(source_rows(path_or_name, config, split), convert,
                   report=LoadReport(str(path_or_name)), on_error=on_error, limit=limit)


# the real sources a sweep names (prepare_data's ``source``, a mixture part's)
LOADERS = {"openr1": load_openr1, "math": load_math, "dapo17k": load_dapo17k}
