"""One-line error text: how bad input is reported everywhere in the project (one line that
names the file, the row or the field).

``one_line`` squeezes any message onto one line. ``validation_problem`` turns a pydantic
``ValidationError`` into ``(field path, problem)``, which the caller prefixes with what it
read: the sweep file (``components.sweep``), a stage's params (``lineage.check_params``),
a method's ``method_config`` (the train stage's params) or a dataset row
(``components.data.rows``). A validator that checks several fields at once names the one at
fault by raising ``FieldError``; the path then points at that field.
"""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

# parts of a pydantic error location that name a validator, not a field
_VALIDATOR_STEPS = {"function-after", "function-before", "function-wrap", "function-plain"}


class FieldError(ValueError):
    """A validator's complaint about one field, relative to the model it validates:
    ``FieldError("models[1]", "'x' is not a key of model_specs")``."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field, self.problem = field, problem


def one_line(text: Any, limit: int | None = None) -> str:
    """``text`` with every run of whitespace (newlines too) as one space, cut at ``limit``."""
    s = " ".join(str(text).split())
    return s if limit is None else s[:limit]


def field_path(loc: tuple) -> str:
    """``("models", 1, "spec") -> "models[1].spec"``; ``"<root>"`` for the model itself."""
    out = ""
    for part in loc:
        if part in _VALIDATOR_STEPS:
            continue
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "<root>"


def _join(path: str, field: str) -> str:
    if path == "<root>":
        return field
    return path + field if field.startswith("[") else f"{path}.{field}"


def validation_problem(e: ValidationError, unknown: str = "unknown key") -> tuple[str, str]:
    """``(field path, problem)`` of the first error, the problem on one line and followed by
    ``(+N more)`` when there are more. ``unknown``: what an extra (forbidden) field is called."""
    errors = e.errors()
    err = errors[0]
    path = field_path(err["loc"])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        path, problem = _join(path, cause.field), cause.problem
    elif err["type"] == "extra_forbidden":
        problem = unknown
    elif err["type"] == "missing":
        problem = "required field is missing"
    else:
        problem = err["msg"].removeprefix("Value error, ")
        if err["type"].endswith("_type") and "input" in err:   # "Input should be a valid string"
            problem += f", got {type(err['input']).__name__}"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return path, one_line(problem) + more
