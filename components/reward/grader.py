"""Verifiable math reward: the response's final answer, checked by math-verify in worker processes.

Per (response, gold) pair:

1. :func:`~components.reward.extract.extract_answer` (parent, pure Python, linear time): the
   content of the LAST ``\\boxed{}`` / ``\\fbox{}``, or, when the response ends with several
   boxes listed together (``\\boxed{1}, \\boxed{2}``; ``\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}``),
   all of them as one multi-part answer, graded as their set the way math-verify grades several
   boxes. Such a run is graded as a whole and never box by box: boxing several different
   answers to a one-answer gold is wrong (the guard against rewarding hedges; rule and its
   source in that module's doc and docs/grading.md). No box -> ``"no_answer"``. Answers over
   ``max_answer_chars`` (10 000) are graded ``"unparsable"``. Neither reaches a worker.
2. Parent-side LRU cache keyed by ``(gold, extracted answer)``; misses are deduplicated.
3. Misses go to worker PROCESSES forked by a zygote, ``python -m components.reward.zygote``: a
   fresh interpreter that imports math-verify once and never the parent's ``__main__`` (nor its
   torch/CUDA state). ``multiprocessing`` spawn/forkserver children re-run the parent's main
   module, which inside an Airflow task is the ``airflow`` executable and fails to import there.
   math-verify 0.9.0 times out with ``signal.alarm``, which only works in a
   main thread, hence processes. A worker reads gold and answer as math-verify reads
   ``\\boxed{...}`` (a trailing ``\\%`` dropped: ``28\\%`` is 28, as math-verify reads a
   percentage; a short single item may fall back to the plain-expression extractor (answers
   only) and to ``$...$``, a list never: ``worker._parse_side``) and tries
   ``verify(gold, pred)`` pair by pair (gold first: it is not symmetric). math-verify's own
   ``parsing_timeout``/``timeout_seconds`` (int seconds, default ``max(1, timeout_s // 2)``) are
   the first line of defence.
4. Hard limit: the parent gives each item ``timeout_s`` of wall-clock time (from the worker's
   previous answer; start-up never counts). An overrunning worker is killed and replaced, the
   item is graded ``"timeout"`` and the rest of its chunk re-queued.

No model text runs as Python: math-verify parses LaTeX with its own parser, and its plain
expression extractor passes sympy only strings of digits, operators and parentheses.

Reasons: ``correct`` (score 1.0), ``wrong``, ``no_answer``, ``unparsable`` (gold or answer gave no
sympy expression and no exact string match), ``timeout`` (the answer ran past a time limit: graded
wrong), ``error`` (the worker grading it crashed); all but ``correct`` score 0.0. Timeouts are
load-dependent and not cached unless ``cache_timeouts=True``; errors never are. Batches are cut
into chunks (~4 per worker, <= ``max_chunk``) handed to idle workers dynamically, so throughput
scales with workers. ``grade_batch`` never raises on model output and never hangs.

Failing loudly: the grader raises :class:`GraderError` instead of scoring zeros when it cannot
grade: the zygote does not start (its stderr is in the message), workers keep dying before their
first answer, or more than ``ERROR_SHARE`` (2 %, at least 2 answers) of a batch's worker-graded
answers end in a worker crash (or more than 2 %, at least 3, of all it ever sent to workers). An answer that fails to parse or verify is ``unparsable``/``wrong``
and one that runs too long is ``timeout``; neither counts as a failure of the grader.

Pool: home-made (kill-and-replace per item, LRU dict), kept over ``pebble.ProcessPool`` +
``cachetools``: pebble starts its workers through ``multiprocessing`` and so re-runs the parent's
``__main__`` in each, the failure the zygote exists to avoid. ``bench/grading_throughput.py``
runs both on the same answers: both hold the bad-input corpus with no hang, this pool is faster
on it (a replaced worker is a fork of the warm zygote) and on ordinary answers they are level
within the noise of a loaded machine.
"""
from __future__ import annotations

import atexit
import math
import os
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from multiprocessing.connection import wait as mp_wait
from typing import Any, Sequence

from components.reward.extract import extract_answer, extract_boxed
from components.reward.pool import GraderError, Worker, Zygote

__all__ = ["Grade", "Grader", "GraderError", "extract_answer", "extract_boxed", "grade_responses", "REASONS"]

REASONS = ("correct", "no_answer", "unparsable", "wrong", "timeout", "error")


@dataclass(frozen=True)
class Grade:
    score: float
    reason: str
    extracted: str | None


# Share of a batch's worker-graded answers that may end in "error" (a worker crash) before the
# batch raises. One crash can be the answer's own doing (a parse that exhausts the worker's
# memory limit kills only that worker; the rest of its chunk is regraded by a fresh one), so a
# single error is tolerated; a broken environment or a dying machine fails most items, far
# above 2 %. Hostile answers that run too long are "timeout" (graded wrong), never "error".
ERROR_SHARE = 0.02


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
        worker_memory_mb: RLIMIT_AS per worker (None: unlimited).
        startup_timeout_s: how long the zygote may take to import math-verify (and a worker to
            answer its first message).
        max_chunk: largest chunk of items handed to a worker at once.
        cache_timeouts: also cache "timeout" results.

    ``stats`` counts: items, no_answer, cache_hits, worker_items (pairs graded by workers),
    timeouts (hard kills), worker_starts, worker_crashes, errors. Thread-safe via an internal
    lock. Raises :class:`GraderError` when it cannot grade (see module doc).
    """

    def __init__(self, workers: int = 2, timeout_s: float = 5.0, cache_size: int = 100_000, *,
                 inner_timeout_s: int | None = None, max_answer_chars: int = 10_000,
                 worker_memory_mb: int | None = 4096, startup_timeout_s: float = 120.0,
                 max_chunk: int = 64, cache_timeouts: bool = False):
        if workers < 1 or timeout_s <= 0:
            raise ValueError("need workers >= 1 and timeout_s > 0")
        self.workers, self.timeout_s, self.cache_size = int(workers), float(timeout_s), cache_size
        self.inner_timeout_s = max(1, int(inner_timeout_s if inner_timeout_s is not None
                                          else self.timeout_s // 2))
        self.max_answer_chars, self.worker_memory_mb = int(max_answer_chars), worker_memory_mb
        self.startup_timeout_s, self.max_chunk = float(startup_timeout_s), max(1, int(max_chunk))
        self.cache_timeouts = cache_timeouts
        self._zygote: Zygote | None = None
        self._pool: list[Worker] = []
        self._cache: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self.stats = dict.fromkeys(("items", "no_answer", "cache_hits", "worker_items", "timeouts",
                                    "worker_starts", "worker_crashes", "errors"), 0)

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
        """Stop all workers and the zygote. The grader may be used again afterwards."""
        with self._lock:
            pool, self._pool = self._pool, []
            zygote, self._zygote = self._zygote, None
            if os.getpid() != self._pid:  # inherited through fork: not ours to stop
                return
            for w in pool:  # idle/starting workers exit on None (or EOF); busy ones may hang: kill
                try:
                    if w.state in ("idle", "starting"):
                        w.conn.send(None)
                        w.kill(signal_it=False)
                    else:
                        w.kill(signal_it=w.state == "busy")
                except Exception:
                    w.kill(signal_it=False)
            if zygote is not None:
                zygote.close()

    def grade(self, response: str, gold: str) -> Grade:
        return self.grade_batch([response], [gold])[0]

    def grade_batch(self, responses: Sequence[str], golds: Sequence[str]) -> list[Grade]:
        """Grade ``responses[i]`` against ``golds[i]``. Never raises on model output; raises
        :class:`GraderError` when the grader itself fails (see module doc)."""
        if len(responses) != len(golds):
            raise ValueError(f"len(responses)={len(responses)} != len(golds)={len(golds)}")
        with self._lock:
            if os.getpid() != self._pid:  # a forked copy: leave the parent's workers alone
                self._pool, self._zygote, self._pid = [], None, os.getpid()
            out: list[Grade | None] = [None] * len(responses)
            pending: dict[tuple[str, str], list[int]] = {}
            for i, (resp, gold) in enumerate(zip(responses, golds)):
                self.stats["items"] += 1
                ans = extract_answer(_as_text(resp))
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
                results = self._run(keys)
                for key, res in zip(keys, results):
                    if self.cache_size > 0 and (res[1] not in ("timeout", "error")
                                                or (self.cache_timeouts and res[1] == "timeout")):
                        self._cache[key] = res
                        while len(self._cache) > self.cache_size:
                            self._cache.popitem(last=False)
                    for i in pending[key]:
                        out[i] = Grade(res[0], res[1], key[1])
            return out  # type: ignore[return-value]

    def _start_worker(self) -> Worker:
        """A freshly forked worker; GraderError if the zygote cannot be (re)started."""
        for _ in range(2):  # a dead zygote (OOM-killed, ...) is restarted once
            if self._zygote is None or not self._zygote.alive():
                if self._zygote is not None:
                    self._zygote.close()
                self._zygote = Zygote(self.inner_timeout_s, self.worker_memory_mb,
                                       self.startup_timeout_s)
            try:
                pid, conn = self._zygote.spawn()
            except (OSError, EOFError):
                self._zygote.close()
                self._zygote = None
                continue
            self.stats["worker_starts"] += 1
            return Worker(pid, conn)
        raise GraderError("math grader: its zygote died twice while forking a worker")

    def _worker_log(self) -> str:
        tail = self._zygote.stderr_tail() if self._zygote is not None else ""
        return f"; worker stderr: {tail}" if tail else ""

    def _run(self, keys: list[tuple[str, str]]) -> list[tuple[float, str]]:
        """Grade unique (gold, answer) keys on the pool, with the hard per-item time limit."""
        results: list[tuple[float, str] | None] = [None] * len(keys)
        size = max(1, min(self.max_chunk, math.ceil(len(keys) / (4 * self.workers))))
        queue = deque(list(range(s, min(s + size, len(keys)))) for s in range(0, len(keys), size))
        keep = [w for w in self._pool if w.state == "starting" or w.usable()]  # drop dead idle ones
        for w in self._pool:
            if w not in keep:
                w.kill(signal_it=False)
        self._pool = keep
        while len(self._pool) < self.workers:  # all at once, so start-ups overlap
            self._pool.append(self._start_worker())
        failed_starts = 0

        def replace(w: Worker, reason: str, running: bool) -> None:
            """Grade w's current item ``reason``, requeue the rest of its chunk, replace w."""
            if w.state == "busy" and w.pos < len(w.chunk):
                results[w.chunk[w.pos]] = (0.0, reason)
                if w.pos + 1 < len(w.chunk):
                    queue.appendleft(w.chunk[w.pos + 1:])
            w.state = "dead"
            w.kill(signal_it=running)
            self._pool[self._pool.index(w)] = self._start_worker()

        while queue or any(w.state == "busy" for w in self._pool):
            if failed_starts >= 3 * self.workers:
                raise GraderError(f"math grader: {failed_starts} workers in a row died before their "
                                  f"first answer{self._worker_log()}")
            for w in list(self._pool):  # hand out work to idle workers
                if w.state == "idle" and queue:
                    chunk = queue.popleft()
                    try:
                        w.conn.send([(j, *keys[j]) for j in chunk])
                        w.state, w.chunk, w.pos, w.t_last = "busy", chunk, 0, time.monotonic()
                    except Exception:
                        queue.appendleft(chunk)
                        self.stats["worker_crashes"] += 1
                        failed_starts += 1
                        replace(w, "error", running=False)
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
                    replace(w, "error", running=False)
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
                    replace(w, "timeout", running=True)
                elif w.state == "starting" and now - w.t_start > self.startup_timeout_s:
                    failed_starts += 1
                    replace(w, "error", running=True)
        if any(r is None for r in results):  # not reachable: the loop ends only when all are graded
            raise GraderError("math grader: items left ungraded")
        errors = sum(r[1] == "error" for r in results)  # type: ignore[index]
        self.stats["errors"] += errors
        if errors > max(1, ERROR_SHARE * len(keys)):
            raise GraderError(f"math grader: {errors} of {len(keys)} answers ended in a worker crash "
                              f"(more than {ERROR_SHARE:.0%}), so this batch cannot be graded"
                              f"{self._worker_log()}")
        # the same rule over the grader's life, for callers that grade a few answers at a time
        total_errors, total = self.stats["errors"], self.stats["errors"] + self.stats["worker_items"]
        if errors and total_errors > max(2, ERROR_SHARE * total):
            raise GraderError(f"math grader: {total_errors} of the {total} answers it sent to workers "
                              f"ended in a worker crash (more than {ERROR_SHARE:.0%}){self._worker_log()}")
        return results  # type: ignore[return-value]


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
