"""The canonical problem schema shared by every loader (synthetic and real), and how a
dataset row is validated.

One JSON object per line (JSONL). Every loader returns ``Problem`` objects; every
stage reads and writes them with ``read_problems`` / ``write_problems``.

Rows are validated by pydantic models (``Row``; ``ProblemRow`` here, one per source format
in ``loaders`` and ``benchmarks``): ``validate_row`` turns the first problem into a one-line
``DataError`` naming the file, the line and the field (``data.jsonl:17: answer: is empty``).
The field types that more than one format uses (a gold answer given as a string or a number,
a MATH-style level, a null that stands for the default) are defined here.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Iterable, Iterator, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from components.error_text import validation_problem


class DataError(ValueError):
    """A malformed file or row. The message names the file and the line."""


@dataclass(frozen=True)
class Problem:
    uid: str                      # stable id, unique within a dataset
    prompt: str                   # the problem statement (no chat template applied)
    answer: str                   # gold final answer, as a string math-verify can parse
    source: str = ""              # dataset / generator name
    level: int | None = None      # difficulty level when known (synthetic: number of terms)
    traces: tuple[str, ...] = ()  # verified expert solutions (response text ending in \boxed{...})
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["traces"] = list(self.traces)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], where: str = "") -> "Problem":
        r = validate_row(ProblemRow, d, where)
        return cls(uid=r.uid, prompt=r.prompt, answer=r.answer, source=r.source, level=r.level,
                   traces=tuple(r.traces), meta=dict(r.meta))


# ------------------------------------------------------------------ rows
class Row(BaseModel):
    """A dataset row as a loader reads it: the fields it uses, strictly typed (a number is not
    a string, a bool is not a number); other columns are ignored."""
    model_config = ConfigDict(extra="ignore", strict=True)


R = TypeVar("R", bound=Row)


def validate_row(model: type[R], row: Any, where: str) -> R:
    """``row`` as a ``model``, or DataError ``"<where>: <field>: <problem>"`` (one line)."""
    try:
        return model.model_validate(row)
    except ValidationError as e:
        field_path, problem = validation_problem(e)
        raise DataError(f"{where}: {field_path}: {problem}") from None


def null_as(default: Any) -> BeforeValidator:
    """A field whose null means its default (``"traces": null`` is no traces)."""
    return BeforeValidator(lambda v: default if v is None else v)


def number_to_answer(x: int | float) -> str:
    """``27.0 -> "27"``, ``0.5 -> "0.5"``, ``7 -> "7"``; NaN/inf are malformed."""
    if isinstance(x, float):
        if not math.isfinite(x):
            raise ValueError(f"is not a finite number ({x})")
        return str(int(x)) if x.is_integer() else repr(x)
    return str(int(x))


def answer_text(v: Any) -> str:
    """A gold answer given as a string or a number, as a non-empty string."""
    if v is None:
        raise ValueError("is null")
    if isinstance(v, str):
        if not v.strip():
            raise ValueError("is empty")
        return v.strip()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be a string or a number, got {type(v).__name__}")
    return number_to_answer(v)


_LEVEL = re.compile(r"^\s*(?:level\s*)?(\d+)\s*$", re.I)


def level_number(v: Any) -> int | None:
    """``3 -> 3``, ``"Level 3" -> 3``, ``"Level ?"``/None -> None; other types are malformed."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"must be an integer or a string like 'Level 3', got {type(v).__name__}")
    return v if isinstance(v, int) else (int(m.group(1)) if (m := _LEVEL.match(v)) else None)


AnswerText = Annotated[str, BeforeValidator(answer_text)]
OptionalAnswerText = Annotated[str | None, BeforeValidator(lambda v: None if v is None else answer_text(v))]
LevelNumber = Annotated[int | None, BeforeValidator(level_number)]


class ProblemRow(Row):
    """A row of a canonical problems file (``write_problems``)."""
    uid: str
    prompt: str
    answer: str
    source: str = ""
    level: int | None = None
    traces: Annotated[list[str], null_as([])] = []
    meta: Annotated[dict[str, Any], null_as({})] = {}


def parse_json_line(raw: bytes, where: str) -> Any:
    """One JSONL line (bytes) as a JSON value, or DataError naming ``where``: invalid
    UTF-8, invalid JSON, and nesting too deep for the parser (a RecursionError inside
    json otherwise) are all one line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{where}: not valid UTF-8 (byte {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: invalid JSON ({e.msg})") from None
    except RecursionError:
        raise DataError(f"{where}: invalid JSON (too deeply nested)") from None


def numbered_lines(path: Path) -> Iterator[tuple[str, bytes]]:
    """``("<path>:<line number>", line)`` per non-blank line, as bytes: a bad line is reported
    with its number (``parse_json_line``), not by the codec."""
    with path.open("rb") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield f"{path}:{lineno}", line


def write_problems(path: str | Path, problems: Iterable[Problem]) -> int:
    path = Path(path)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps(p.to_json(), ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def read_problems(path: str | Path) -> list[Problem]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    out: list[Problem] = []
    seen: set[str] = set()
    for where, line in numbered_lines(path):
        d = parse_json_line(line, where)
        if not isinstance(d, dict):
            raise DataError(f"{where}: expected a JSON object")
        p = Problem.from_json(d, where)
        if p.uid in seen:
            raise DataError(f"{where}: duplicate uid '{p.uid}'")
        seen.add(p.uid)
        out.append(p)
    return out
