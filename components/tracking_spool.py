"""Tracking that a tracking-server outage cannot stop: what a stage logs while the server
does not answer is appended to a spool file in the stage's work dir and sent, in order,
once the server answers again (probed every ``RLVR_TRACKING_PROBE_S``), at the latest
when the stage ends, which waits up to ``RLVR_TRACKING_WAIT_S`` for it. A stage whose
server never comes back still leaves its artifact complete and raises
:class:`TrackingUnavailable` naming the spool; ``rlvr tracking replay`` sends it later.

MLflow's client retries a failed call 7 times with exponential backoff and a 120 s
timeout (minutes per call); :func:`bound_client_retries` replaces that default with
``RLVR_TRACKING_RETRIES`` retries of ``RLVR_TRACKING_TIMEOUT_S`` each, unless the
``MLFLOW_HTTP_REQUEST_*`` variables are set. Replaying is idempotent: a metric row keeps
its original timestamp, and the store drops a row identical to one it holds, so a batch
that reached the server just before the connection broke is not stored twice.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from components.artifacts import write_atomic

RETRIES_ENV, TIMEOUT_ENV = "RLVR_TRACKING_RETRIES", "RLVR_TRACKING_TIMEOUT_S"
WAIT_ENV, PROBE_ENV = "RLVR_TRACKING_WAIT_S", "RLVR_TRACKING_PROBE_S"
SPOOL_DIR = "tracking-spool"   # under the stage's work dir
log = logging.getLogger("rlvr.tracking")


class TrackingUnavailable(RuntimeError):
    """The tracking server did not answer before the stage's end; its records are spooled."""


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number of seconds") from None


_clients: dict[str, Any] = {}


def client():
    """The MLflow client of this process's tracking store, its retries bounded; one store (and
    one sqlite engine) per URI per process."""
    from mlflow import MlflowClient

    from components.artifacts import tracking_uri

    uri = tracking_uri()
    if uri not in _clients:
        bound_client_retries()
        _clients[uri] = MlflowClient(tracking_uri=uri)
    return _clients[uri]


def bound_client_retries() -> None:
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", os.environ.get(RETRIES_ENV, "2"))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", os.environ.get(TIMEOUT_ENV, "10"))


def is_outage(e: BaseException) -> bool:
    """A call that failed because the server did not answer (refused, timed out, 5xx after
    the retries), as opposed to one the server refused (a bad value: that one raises)."""
    from mlflow.exceptions import MlflowException
    if isinstance(e, MlflowException):
        return str(e.message).startswith("API request to ") or e.get_http_status_code() in (502, 503, 504)
    return isinstance(e, (ConnectionError, TimeoutError))


def server_answers(uri: str) -> bool:
    """A cheap probe (``/health``, 2 s, no retries) before a replay; a local store always answers."""
    if not uri.startswith(("http://", "https://")):
        return True
    import httpx
    try:
        return httpx.get(uri.rstrip("/") + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Spool:
    """Records of one run, one JSON object per line, in the order they were logged."""

    def __init__(self, path: Path):
        self.path = path

    def records(self) -> list[dict]:
        if not self.path.exists():
            return []
        out, lines = [], self.path.read_text().splitlines()
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                # only the last line can be cut short (a process killed mid-write); its call never returned
                if i != len(lines):
                    raise ValueError(f"{self.path}: line {i} is not JSON") from None
        return out

    def pending(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def append(self, records: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
            f.flush()
            os.fsync(f.fileno())

    def keep(self, records: list[dict]) -> None:
        """Replace the spool by ``records`` (what is still unsent); none left: remove it."""
        if not records:
            self.path.unlink(missing_ok=True)
            return
        write_atomic(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


# How each record kind reaches MLflow: components.tracking registers metrics, params, tags and
# end (with its client), components.lineage the stage outputs (artifacts, tables, registered
# policy). This module imports neither, so both can import it.
SENDERS: dict[str, Callable[[str, dict], None]] = {}


def apply(run_id: str, rec: dict) -> None:
    """Send one record to its run through the sender registered for its kind."""
    send = SENDERS.get(rec["kind"])
    if send is None:
        raise ValueError(f"unknown spool record kind {rec['kind']!r} (known: {', '.join(sorted(SENDERS))})")
    send(run_id, rec)


class Sender:
    """Sends a run's records now, or spools them while the server does not answer."""

    def __init__(self, run_id: str, spool_dir: Path | None, uri: str):
        self.run_id, self.uri = run_id, uri
        self.spool = Spool(spool_dir / f"{run_id}.jsonl") if spool_dir is not None else None
        self.retry_at = 0.0

    def send(self, records: list[dict]) -> None:
        if self.spool is None:
            for r in records:
                apply(self.run_id, r)
            return
        if self.spool.pending():
            self.spool.append(records)   # after what is already waiting: order is kept
            self.replay()
            return
        for i, r in enumerate(records):
            try:
                apply(self.run_id, r)
            except Exception as e:  # noqa: BLE001 - only an outage is spooled; anything else raises
                if not is_outage(e):
                    raise
                self.spool.append(records[i:])
                self._down(e)
                return

    def _down(self, e: BaseException) -> None:
        probe = _env_float(PROBE_ENV, 15.0)
        if self.retry_at == 0.0:
            log.warning("tracking server %s does not answer (%s); run %s's records are spooled to %s and sent "
                        "when it answers", self.uri, " ".join(str(e).split())[:200], self.run_id, self.spool.path)
        self.retry_at = time.monotonic() + probe

    def replay(self, force: bool = False) -> bool:
        """Send the spooled records in order; True when none is left."""
        if self.spool is None or not self.spool.pending():
            return True
        if not force and time.monotonic() < self.retry_at:
            return False
        if not server_answers(self.uri):
            self.retry_at = time.monotonic() + _env_float(PROBE_ENV, 15.0)
            return False
        recs = self.spool.records()
        for i, r in enumerate(recs):
            try:
                apply(self.run_id, r)
            except Exception as e:  # noqa: BLE001
                if not is_outage(e):
                    raise
                self.spool.keep(recs[i:])
                self._down(e)
                return False
        self.spool.keep([])
        log.warning("tracking server %s answers again: %d spooled record(s) of run %s sent", self.uri, len(recs),
                    self.run_id)
        self.retry_at = 0.0
        return True

    def close(self, records: list[dict], wait: float | None = None) -> None:
        """The run's last records; waits up to ``wait`` s (default ``RLVR_TRACKING_WAIT_S``, else
        300) for the server."""
        self.send(records)
        if self.spool is None or not self.spool.pending():
            return
        wait = _env_float(WAIT_ENV, 300.0) if wait is None else wait
        t_end = time.monotonic() + wait
        while not self.replay(force=True):
            if time.monotonic() >= t_end:
                n = len(self.spool.records())
                raise TrackingUnavailable(
                    f"tracking server {self.uri} did not answer within {wait:g}s ({WAIT_ENV}) at the end of the "
                    f"stage: {n} record(s) of run {self.run_id} are spooled in {self.spool.path}; send them with "
                    f"`rlvr tracking replay {self.spool.path}` once it answers")
            time.sleep(min(2.0, max(0.1, t_end - time.monotonic())))


def replay_file(path: Path, uri: str) -> int:
    """Send one spool file (``<run id>.jsonl``) to its run now; the number of records sent."""
    s = Sender(path.stem, path.parent, uri)
    n = len(s.spool.records())
    if not server_answers(uri):
        raise TrackingUnavailable(f"tracking server {uri} does not answer; {path} keeps its {n} record(s)")
    if not s.replay(force=True):
        raise TrackingUnavailable(f"tracking server {uri} stopped answering; {path} keeps what is unsent")
    return n


def spools(home: Path) -> list[Path]:
    """Every spool file under the store's work dirs."""
    return sorted((home / "work").glob(f"*/*/{SPOOL_DIR}/*.jsonl"))


def record(kind: str, items: Any = None, **extra: Any) -> dict:
    return {"kind": kind, **({"items": items} if items is not None else {}), **extra}
