"""Verifiable math reward: extract the last ``\\boxed{}`` answer and check it with math-verify.

Per (response, gold) pair:

1. :func:`extract_boxed` (parent, pure Python, linear time): content of the LAST ``\\boxed{}`` /
   ``\\fbox{}``; none -> ``"no_answer"``. Answers over ``max_answer_chars`` (10 000) are graded
   ``"unparsable"``. Neither reaches a worker.
2. Parent-side LRU cache keyed by ``(gold, extracted answer)``; misses are deduplicated.
3. Misses go to worker PROCESSES (``forkserver`` by default: workers never inherit the parent's
   torch/CUDA state). math-verify 0.9.0 times out with ``signal.alarm``, which only works in a
   main thread, hence processes. A worker wraps gold and answer as ``\\boxed{...}`` (an answer of
   <= 200 chars that gives no expression is retried as ``$...$``, e.g. ``3\\%``), parses them with
   ``[LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]`` and tries
   ``verify(gold, pred)`` pair by pair (gold first: it is not symmetric). math-verify's own
   ``parsing_timeout``/``timeout_seconds`` (int seconds, default ``max(1, timeout_s // 2)``) are
   the first line of defence.
4. Hard limit: the parent gives each item ``timeout_s`` of wall-clock time (from the worker's
   previous answer; start-up never counts). An overrunning worker is killed and replaced, the
   item is graded ``"timeout"`` and the rest of its chunk re-queued.

No model text runs as Python: math-verify parses LaTeX with its own parser, and its plain
expression extractor passes sympy only strings of digits, operators and parentheses.

Reasons: ``correct`` (score 1.0), ``wrong``, ``no_answer``, ``unparsable`` (gold or answer gave no
sympy expression and no exact string match), ``timeout``, ``error`` (worker crash or unexpected
exception); all but ``correct`` score 0.0. Timeouts/errors are load-dependent and not cached
unless ``cache_timeouts=True``. Batches are cut into chunks (~4 per worker, <= ``max_chunk``)
handed to idle workers dynamically, so throughput scales with workers. ``grade_batch`` never raises
on model output (only on mismatched lengths) and never hangs.
"""
from __future__ import annotations

import atexit
import math
import multiprocessing as mp
import os
import re
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from multiprocessing.connection import wait as mp_wait
from typing import Any, Sequence

__all__ = ["Grade", "Grader", "extract_boxed", "grade_responses", "REASONS"]

REASONS = ("correct", "no_answer", "unparsable", "wrong", "timeout", "error")

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*\{")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.S)  # an escape pair, or a brace


@dataclass(frozen=True)
class Grade:
    score: float
    reason: str
    extracted: str | None


# ------------------------------------------------------------------ extraction (parent side)
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
        brace = last[0].end() - 1
        depth = 0
        for m in _BRACE_TOKEN.finditer(text, brace):
            tok = m.group()
            if tok == "{":
                depth += 1
            elif tok == "}":
                depth -= 1
                if depth == 0:
                    return text[brace + 1:m.start()]
            # else: an escaped character (\{, \}, \\, \frac...): ignored
        return None
    except Exception:  # pragma: no cover - defensive: extraction must never raise
        return None


# ------------------------------------------------------------------ worker side: components/reward/worker.py
from components.reward.worker import _grade_pair, _is_expr, _parse, _worker_main  # noqa: E402,F401


# ------------------------------------------------------------------ parent side
class _Worker:
    def __init__(self, proc, conn):
        self.proc, self.conn = proc, conn
        self.state = "starting"  # starting | idle | busy | dead
        self.chunk: list[int] = []
        self.pos = 0
        self.t_start = self.t_last = time.monotonic()

    def poll(self) -> bool:
        try:
            return self.conn.poll(0)
        except Exception:
            return False

    def kill(self) -> None:
        for step in (self.conn.close, self.proc.kill, lambda: self.proc.join(timeout=2.0)):
            try:
                step()
            except Exception:
                pass


def _as_text(x: Any) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, (bytes, bytearray)):
        return bytes(x).decode("utf-8", errors="replace")
    return "" if x is None else str(x)


class Grader:
    """Process-pool math grader with a hard per-item timeout and an LRU cache (see module doc).

    Args:
        workers: number of worker processes (started on first use, reused, replaced when killed).
        timeout_s: hard wall-clock limit per item, enforced by the parent (kill + restart).
        cache_size: entries of the parent LRU cache keyed by (gold, extracted answer).
        inner_timeout_s: math-verify's own parse/verify timeouts (int seconds, >= 1);
            None -> max(1, floor(timeout_s / 2)).
        max_answer_chars: longer extracted answers are graded "unparsable" without a worker.
        mp_context: "forkserver" (default; preloads math_verify in the server so restarts are
            fast) or "spawn"; never plain fork (the parent holds torch). As with any spawn-style
            start, a script using the grader needs an ``if __name__ == "__main__":`` guard.
        worker_memory_mb: RLIMIT_AS per worker (None: unlimited).
        startup_timeout_s: how long a starting worker may take to import math-verify.
        max_chunk: largest chunk of items handed to a worker at once.
        cache_timeouts: also cache "timeout"/"error" results.

    ``stats`` counts: items, no_answer, cache_hits, worker_items (pairs graded by workers),
    timeouts (hard kills), worker_starts, worker_crashes. Thread-safe via an internal lock.
    """

    def __init__(self, workers: int = 2, timeout_s: float = 5.0, cache_size: int = 100_000, *,
                 inner_timeout_s: int | None = None, max_answer_chars: int = 10_000,
                 mp_context: str = "forkserver", worker_memory_mb: int | None = 4096,
                 startup_timeout_s: float = 120.0, max_chunk: int = 64,
                 cache_timeouts: bool = False):
        if workers < 1 or timeout_s <= 0:
            raise ValueError("need workers >= 1 and timeout_s > 0")
        if mp_context not in ("forkserver", "spawn"):
            raise ValueError("mp_context must be 'forkserver' or 'spawn' (the parent holds torch)")
        self.workers, self.timeout_s, self.cache_size = int(workers), float(timeout_s), cache_size
        self.inner_timeout_s = max(1, int(inner_timeout_s if inner_timeout_s is not None
                                          else self.timeout_s // 2))
        self.max_answer_chars, self.worker_memory_mb = int(max_answer_chars), worker_memory_mb
        self.startup_timeout_s, self.max_chunk = float(startup_timeout_s), max(1, int(max_chunk))
        self.cache_timeouts, self._ctx_name, self._ctx = cache_timeouts, mp_context, None
        self._pool: list[_Worker] = []
        self._cache: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self.stats = dict.fromkeys(("items", "no_answer", "cache_hits", "worker_items", "timeouts",
                                    "worker_starts", "worker_crashes"), 0)

    def __enter__(self) -> "Grader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # best effort
        try:
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        """Stop all workers (politely, then by kill). The grader may be used again afterwards."""
        with self._lock:
            pool, self._pool = self._pool, []
            if os.getpid() != self._pid:  # inherited through fork: not ours to stop
                return
            for w in pool:  # idle/starting workers exit on None; busy ones may hang: kill
                try:
                    w.conn.send(None) if w.state in ("idle", "starting") else w.kill()
                except Exception:
                    pass
            deadline = time.monotonic() + 1.0
            for w in pool:
                try:
                    w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
                except Exception:
                    pass
                w.kill()

    def grade(self, response: str, gold: str) -> Grade:
        return self.grade_batch([response], [gold])[0]

    def grade_batch(self, responses: Sequence[str], golds: Sequence[str]) -> list[Grade]:
        """Grade ``responses[i]`` against ``golds[i]``; never raises on model output."""
        if len(responses) != len(golds):
            raise ValueError(f"len(responses)={len(responses)} != len(golds)={len(golds)}")
        with self._lock:
            if os.getpid() != self._pid:  # a forked copy: leave the parent's workers alone
                self._pool, self._pid = [], os.getpid()
            out: list[Grade | None] = [None] * len(responses)
            pending: dict[tuple[str, str], list[int]] = {}
            for i, (resp, gold) in enumerate(zip(responses, golds)):
                self.stats["items"] += 1
                ans = extract_boxed(_as_text(resp))
                if ans is None:
                    self.stats["no_answer"] += 1
                    out[i] = Grade(0.0, "no_answer", None)
                elif len(ans) > self.max_answer_chars:
                    out[i] = Grade(0.0, "unparsable", ans)
                elif (key := (_as_text(gold), ans)) in self._cache:
                    self._cache.move_to_end(key)
                    self.stats["cache_hits"] += 1
                    out[i] = Grade(*self._cache[key], ans)
                else:
                    pending.setdefault(key, []).append(i)
            if pending:
                keys = list(pending)
                try:
                    results = self._run(keys)
                except Exception:  # never raise on model output
                    results = [(0.0, "error")] * len(keys)
                for key, res in zip(keys, results):
                    if self.cache_size > 0 and (res[1] not in ("timeout", "error")
                                                or self.cache_timeouts):
                        self._cache[key] = res
                        while len(self._cache) > self.cache_size:
                            self._cache.popitem(last=False)
                    for i in pending[key]:
                        out[i] = Grade(res[0], res[1], key[1])
            return out  # type: ignore[return-value]

    def _start_worker(self) -> _Worker:
        if self._ctx is None:
            self._ctx = mp.get_context(self._ctx_name)
            if self._ctx_name == "forkserver":  # no effect if the server is already running
                self._ctx.set_forkserver_preload(["math_verify", __name__])
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_worker_main, name="math-grader", daemon=True,
                                 args=(child_conn, self.inner_timeout_s, self.worker_memory_mb))
        proc.start()
        child_conn.close()
        self.stats["worker_starts"] += 1
        return _Worker(proc, parent_conn)

    def _run(self, keys: list[tuple[str, str]]) -> list[tuple[float, str]]:
        """Grade unique (gold, answer) keys on the pool, with the hard per-item time limit."""
        results: list[tuple[float, str] | None] = [None] * len(keys)
        size = max(1, min(self.max_chunk, math.ceil(len(keys) / (4 * self.workers))))
        queue = deque(list(range(s, min(s + size, len(keys)))) for s in range(0, len(keys), size))
        self._pool = [w for w in self._pool if w.proc.is_alive()]
        while len(self._pool) < self.workers:  # all at once, so start-ups overlap
            self._pool.append(self._start_worker())
        failed_starts = 0

        def replace(w: _Worker, reason: str) -> None:
            """Grade w's current item ``reason``, requeue the rest of its chunk, replace w."""
            if w.state == "busy" and w.pos < len(w.chunk):
                results[w.chunk[w.pos]] = (0.0, reason)
                if w.pos + 1 < len(w.chunk):
                    queue.appendleft(w.chunk[w.pos + 1:])
            w.state = "dead"
            w.kill()
            self._pool[self._pool.index(w)] = self._start_worker()

        while (queue or any(w.state == "busy" for w in self._pool)) \
                and failed_starts < 3 * self.workers:  # give up if workers cannot start at all
            for w in list(self._pool):  # hand out work to idle workers
                if w.state == "idle" and queue:
                    chunk = queue.popleft()
                    try:
                        w.conn.send([(j, *keys[j]) for j in chunk])
                        w.state, w.chunk, w.pos, w.t_last = "busy", chunk, 0, time.monotonic()
                    except Exception:
                        queue.appendleft(chunk)
                        self.stats["worker_crashes"] += 1
                        replace(w, "error")
            live = [w for w in self._pool if w.state in ("busy", "starting")]
            if not live:
                continue
            deadline = min(w.t_last + self.timeout_s if w.state == "busy"
                           else w.t_start + self.startup_timeout_s for w in live)
            ready = mp_wait([w.conn for w in live], timeout=max(0.0, deadline - time.monotonic()))
            for w in live:
                if w.conn not in ready:
                    continue
                try:
                    msg = w.conn.recv()
                except Exception:  # the worker died (segfault, OOM kill, ...)
                    self.stats["worker_crashes"] += 1
                    failed_starts += w.state == "starting"
                    replace(w, "error")
                    continue
                if w.state == "starting":
                    w.state, failed_starts = "idle", 0
                elif w.pos < len(w.chunk) and w.chunk[w.pos] == msg[0]:
                    results[msg[0]] = (float(msg[1]), str(msg[2]))
                    self.stats["worker_items"] += 1
                    w.pos, w.t_last = w.pos + 1, time.monotonic()
                    if w.pos >= len(w.chunk):
                        w.state, w.chunk = "idle", []
            now = time.monotonic()
            for w in live:
                if w.state == "busy" and now - w.t_last > self.timeout_s and not w.poll():
                    self.stats["timeouts"] += 1
                    replace(w, "timeout")
                elif w.state == "starting" and now - w.t_start > self.startup_timeout_s:
                    failed_starts += 1
                    replace(w, "error")
        return [r if r is not None else (0.0, "error") for r in results]


# ------------------------------------------------------------------ module-level convenience
_SHARED: Grader | None = None
_SHARED_LOCK = threading.Lock()


def grade_responses(responses: Sequence[str], golds: Sequence[str],
                    timeout_s: float = 5.0) -> list[Grade]:
    """Grade with a shared, lazily created :class:`Grader` (closed at interpreter exit).

    The shared grader is recreated if ``timeout_s`` changes.
    """
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or _SHARED.timeout_s != float(timeout_s):
            if _SHARED is None:
                atexit.register(lambda: _SHARED is not None and _SHARED.close())
            else:
                _SHARED.close()
            _SHARED = Grader(timeout_s=timeout_s)
        grader = _SHARED
    return grader.grade_batch(responses, golds)
