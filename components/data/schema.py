"""The canonical problem schema shared by every loader (synthetic and real).

One JSON object per line (JSONL). Every loader returns ``Problem`` objects; every
stage reads and writes them with ``read_problems`` / ``write_problems``.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable


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
        for key in ("uid", "prompt", "answer"):
            if key not in d:
                raise DataError(f"{where}: missing field '{key}'")
            if not isinstance(d[key], str):
                raise DataError(f"{where}: field '{key}' must be a string, got {type(d[key]).__name__}")
        traces = d.get("traces") or ()
        if not isinstance(traces, (list, tuple)) or not all(isinstance(t, str) for t in traces):
            raise DataError(f"{where}: field 'traces' must be a list of strings")
        if not isinstance(d.get("meta") or {}, dict):
            raise DataError(f"{where}: field 'meta' must be an object")
        level = d.get("level")
        if level is not None and not isinstance(level, int):
            raise DataError(f"{where}: field 'level' must be an integer or null")
        return cls(uid=d["uid"], prompt=d["prompt"], answer=d["answer"], source=d.get("source", ""),
                   level=level, traces=tuple(traces), meta=dict(d.get("meta") or {}))


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
    with path.open("rb") as f:  # bytes: a bad line is reported with its number, not by the codec
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            d = parse_json_line(line, where)
            if not isinstance(d, dict):
                raise DataError(f"{where}: expected a JSON object")
            p = Problem.from_json(d, where)
            if p.uid in seen:
                raise DataError(f"{where}: duplicate uid '{p.uid}'")
            seen.add(p.uid)
            out.append(p)
    return out
