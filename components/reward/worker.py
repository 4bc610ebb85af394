"""The grading worker: math-verify on (gold, answer) pairs, one pair at a time.

Workers are forked by the zygote (``components/reward/zygote.py``). A worker grades in its
main thread (math-verify times out with ``signal.alarm``, which needs one). Never imports
torch; the parent enforces the hard wall-clock limit by killing a worker that overruns.
"""
from __future__ import annotations

import os
import re
import signal
from collections import OrderedDict
from typing import Any

_GOLDS: OrderedDict = OrderedDict()  # per-worker cache of parsed golds (n rollouts share one gold)
_CFG: dict = {}
_PERCENT = re.compile(r"\s*\\%\s*$")  # a trailing \% (a bare % starts a LaTeX comment)


def _is_expr(x: Any) -> bool:
    from sympy import Basic, MatrixBase

    return isinstance(x, (Basic, MatrixBase))


def _configs() -> dict:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    box = LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)
    return {"box": [box],                                              # a box, read whole
            "span": [LatexExtractionConfig(boxed_match_priority=0)],   # any LaTeX span
            "expr": [ExprExtractionConfig()]}                          # a plain expression


def _parse(text: str, inner: int, cfg: str = "span") -> list:
    """math-verify ``parse`` with one of :func:`_configs`; parse errors give []; math-verify's
    TimeoutException propagates."""
    from math_verify import parse

    if not _CFG:
        _CFG.update(_configs())
    try:
        return parse(text, extraction_config=_CFG[cfg], parsing_timeout=inner, raise_on_error=True)
    except Exception:  # TimeoutException is a BaseException: not caught here
        return []


def _is_list(text: str) -> bool:
    """A comma outside brackets: several answers (math-verify's set), e.g. ``1, 2`` but not ``(1, 2)``."""
    depth = 0
    for ch in text:
        depth = depth + (ch in "([{") - (ch in ")]}")
        if ch == "," and depth <= 0:
            return True
    return False


def _parse_side(text: str, inner: int, gold: bool = False) -> list:
    """One side (gold or answer) as math-verify reads a boxed final answer: ``\\boxed{text}``,
    a trailing ``\\%`` dropped (math-verify reads ``\\boxed{28}\\%`` and the bare gold ``28\\%``
    as 28, but gets no expression from ``\\boxed{28\\%}``).

    Fallbacks for a side of <= 200 chars that gives no expression, in order: ``$text$`` (any
    LaTeX span), then, for an answer that is one item, math-verify's plain-expression extractor
    (the leading number of ``4'; DROP TABLE ...``). A list (a comma outside brackets) is taken
    from a fallback only when read whole, as a set: each fallback can read one piece of it
    (``\\frac{1}{4}`` out of ``\\frac{1}{4}, (2,12)``, ``0.8`` out of ``0.8, \\text{a condition}``),
    which would reward a hedge. A gold never goes through the plain-expression extractor: it
    reads the ``1`` of ``\\{x|-2\\leq x < 1\\}``, making every answer holding a 1 correct."""
    from sympy import FiniteSet

    bare = _PERCENT.sub("", text)
    listed = _is_list(bare)
    parsed = _parse("\\boxed{" + bare + "}", inner, "box")
    fallbacks = [("$" + text + "$", "span")] + ([] if gold or listed else [(text, "expr")])
    for alt_text, cfg in fallbacks if len(text) <= 200 else ():
        if any(_is_expr(p) for p in parsed):
            break
        alt = [p for p in _parse(alt_text, inner, cfg) if not listed or isinstance(p, FiniteSet)]
        if any(_is_expr(p) for p in alt):  # keep the box's raw text: an exact match still counts
            parsed = alt + [p for p in parsed if isinstance(p, str)]
    return parsed


def _grade_pair(gold: str, answer: str, inner: int) -> tuple[float, str]:
    """Grade one extracted answer against one gold (inside a worker's main thread)."""
    from math_verify import verify
    from math_verify.errors import TimeoutException

    try:
        if gold in _GOLDS:
            _GOLDS.move_to_end(gold)
        else:
            g = gold.strip()
            if "\\boxed" in g or "\\fbox" in g or (len(g) > 1 and g[0] == g[-1] == "$"):
                _GOLDS[gold] = _parse(g, inner, "span")  # a gold with its own delimiters
            else:
                _GOLDS[gold] = _parse_side(g, inner, gold=True)
            if len(_GOLDS) > 4096:
                _GOLDS.popitem(last=False)
        g_parsed = _GOLDS[gold]
        p_parsed = _parse_side(answer, inner)
    except TimeoutException:
        return 0.0, "timeout"
    if not g_parsed or not p_parsed:
        return 0.0, "unparsable"
    timed_out = False
    for g in g_parsed:  # pairwise so that a timeout is told apart from "not equal"
        for p in p_parsed:
            try:
                if verify(g, p, timeout_seconds=inner, raise_on_error=True):
                    return 1.0, "correct"
            except TimeoutException:
                timed_out = True
            except Exception:  # a failed comparison means "not equal", as in math-verify
                pass
    if timed_out:
        return 0.0, "timeout"
    if not any(_is_expr(g) for g in g_parsed) or not any(_is_expr(p) for p in p_parsed):
        return 0.0, "unparsable"  # only raw-string fallbacks, and they differ
    return 0.0, "wrong"


def _worker_main(conn, inner: int, memory_mb: int | None) -> None:
    """Worker loop: recv a chunk [(job_id, gold, answer)], send (job_id, score, reason) per item."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    _limit_memory(memory_mb)
    import logging

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401  (imported before "ready": start-up is not item time)

    conn.send(("ready", os.getpid()))
    while True:
        try:
            chunk = conn.recv()
            if chunk is None:
                return
            for job_id, gold, answer in chunk:
                try:
                    score, reason = _grade_pair(gold, answer, inner)
                except BaseException as e:  # noqa: BLE001 - incl. math-verify's TimeoutException
                    score, reason = 0.0, ("timeout" if type(e).__name__ == "TimeoutException"
                                          else "error")
                conn.send((job_id, score, reason))
        except (EOFError, OSError):  # parent went away
            return


def _limit_memory(memory_mb: int | None) -> None:
    try:
        if memory_mb:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (int(memory_mb) << 20, int(memory_mb) << 20))
    except Exception:
        pass
