"""The answer a response gives: its last ``\\boxed{}``, or the run of boxes it ends with.

Pure Python, linear time, never raises; runs in the grading parent, so a hostile response never
reaches a worker unless it boxes something.

The rule (:func:`extract_answer`) follows math-verify's reading of several boxes
(``latex2sympy2_extended.math_normalization.extract_boxed_content``, the ``boxed="last"`` mode it
uses on a whole completion): walking back from the last box, an earlier box belongs to the same
answer when the text between the two is short (under ``RUN_GAP`` characters) and lists them, so
``\\boxed{1}, \\boxed{2}``, ``\\boxed{(2, 2)} \\quad\\text{and}\\quad \\boxed{(6, 2)}`` and
``$x_1 = \\boxed{1}$ or $x_2 = \\boxed{2}$`` are one answer with several parts, graded as their
set (``"1, 2"``), the way math-verify grades them. Two deliberate differences:

- the text between must hold a separator (``and``, ``or``, ``,``, ``;``, math-verify's list) or
  only spacing (blanks, ``$``, ``\\quad``, ``~``); math-verify also joins any two boxes less than
  10 characters apart, which would read the correction ``\\boxed{5} then \\boxed{4}`` as the set
  {5, 4}; here the last box alone is the answer;
- the parts are joined with ``", "``, not ``","``: math-verify reads ``58,500`` as one number.

Reward-hacking guard: a run is graded as a whole, never box by box, so a response that boxes
several different answers (``\\boxed{1} or \\boxed{2}``) to a one-answer gold is wrong, while the
same boxes are right for a two-part gold ``1, 2``.
"""
from __future__ import annotations

import re
from collections import deque

__all__ = ["extract_answer", "extract_boxed", "RUN_GAP", "MAX_PARTS"]

RUN_GAP = 70     # math-verify's bound on the text between two boxes of one answer
MAX_PARTS = 64   # boxes looked at from the end (a longer run is graded on its last 64)

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*\{")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.S)  # an escape pair, or a brace
_SEPARATOR = re.compile(r"\b(?:and|or)\b|,|;")  # math-verify's VALID_SEPARATOR_PATTERN
_SPACING = re.compile(r"(?:\s|\$|~|\\[,;:! ]|\\q?quad(?![A-Za-z])|\\[()\[\]])*")


def _close(text: str, brace: int, stop: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``brace``, looking no further than ``stop``."""
    depth = 0
    for m in _BRACE_TOKEN.finditer(text, brace, stop):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return m.start()
        # else: an escaped character (\{, \}, \\, \frac...): ignored
    return None


def _boxes(text: str) -> list[tuple[int, int, int]]:
    """(macro start, content start, closing brace) of the boxes ending the text, last first: the
    last box, then each earlier one that closes before the next starts, up to ``MAX_PARTS``."""
    opens = deque(_BOX_OPEN.finditer(text), maxlen=MAX_PARTS)
    out: list[tuple[int, int, int]] = []
    stop = len(text)
    while opens:
        m = opens.pop()
        if m.start() >= stop:
            continue  # inside a later box (``\\boxed{\\boxed{5}}``): the inner one was taken
        end = _close(text, m.end() - 1, stop)
        if end is None:
            break
        out.append((m.start(), m.end(), end))
        stop = m.start()
    return out


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` or ``\\fbox{...}`` in ``text``, or None.

    "Last" means the last macro occurrence in the text (for ``\\boxed{\\boxed{1}}`` that is the
    inner one); ``\\boxed {x}`` is accepted, ``\\boxedx`` is another macro. Braces are matched
    with nesting; escaped pairs (``\\{``, ``\\}``, ``\\\\``) do not count. If the last box is
    unbalanced the result is None. Linear time, never raises.
    """
    try:
        if not isinstance(text, str):
            return None
        last = deque(_BOX_OPEN.finditer(text), maxlen=1)
        if not last:
            return None
        end = _close(text, last[0].end() - 1, len(text))
        return None if end is None else text[last[0].end():end]
    except Exception:  # pragma: no cover - defensive: extraction must never raise
        return None


def _lists(between: str) -> bool:
    return len(between) < RUN_GAP and (_SEPARATOR.search(between) is not None
                                      or _SPACING.fullmatch(between) is not None)


def extract_answer(text: str) -> str | None:
    """The answer ``text`` gives (module doc): the last box's content, or the contents of the run
    of listed boxes it ends with, distinct parts in order, joined with ``", "``. None when the
    text has no box or its last box is unbalanced. Linear time, never raises."""
    try:
        if not isinstance(text, str):
            return None
        boxes = _boxes(text)
        if not boxes:
            return None  # no box, or the last one is unbalanced (graded no_answer, as ever)
        parts = [text[boxes[0][1]:boxes[0][2]]]
        for (start, _, _), (_, c0, c1) in zip(boxes, boxes[1:]):
            if not _lists(text[c1 + 1:start]):
                break
            parts.append(text[c0:c1])
        if len(parts) == 1:
            return parts[0]  # verbatim, as the last box alone has always been graded
        distinct = list(dict.fromkeys(p.strip() for p in reversed(parts)))
        return ", ".join(distinct)
    except Exception:  # pragma: no cover - defensive: extraction must never raise
        return None
