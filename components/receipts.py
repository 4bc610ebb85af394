"""Sweep receipts: a fully cached rerun of a sweep without starting Airflow.

While ``rlvr sweep`` runs a DAG, every stage task (``dags/rlvr_sweep.py``, ``rlvr run-stage``)
appends what it asked ``lineage.run_stage`` and what it got back (stage, params, inputs, cache
key, output) to a receipt file named by ``RLVR_RECEIPT``. After a successful DAG run the
receipt is kept under ``$RLVR_HOME/receipts/<sweep>.json`` with a fingerprint of the sweep
(its validated config and the code that wires it into a DAG).

The next ``rlvr sweep`` of the same file checks the receipt before starting Airflow (which
costs ~25 s even when every task is a cache hit): same fingerprint, and for every recorded
call the cache key recomputed with today's stage code (its VERSION and its code fingerprint,
``components/code_fingerprint.py``) and today's input digests equals the recorded one
(``lineage.cache_key_of``) and the output is a verified, FINISHED cache entry
(``lineage.cached``). Then the DAG would run exactly these calls and hit the cache in each, so
it is skipped. Anything else (a changed sweep, a stage whose VERSION or defaults changed, a
tampered or deleted artifact) sends the run through Airflow as usual, and the reason is printed.

This module imports ``components.lineage`` (in ``all_cached``) and lineage never imports it:
the callers of ``run_stage`` record.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

from components.artifacts import write_atomic

RECEIPT_ENV = "RLVR_RECEIPT"
REPO = Path(__file__).resolve().parents[1]
# the code that turns a sweep file into stage calls: a change here may change the calls
WIRING = (REPO / "dags" / "rlvr_sweep.py", REPO / "components" / "sweep.py")


def receipt_path(home: Path, sweep: str) -> Path:
    return home / "receipts" / f"{sweep}.json"


def fingerprint(config: dict[str, Any]) -> str:
    h = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for f in WIRING:
        h.update(f.read_bytes() if f.is_file() else b"")
    return h.hexdigest()


def record(stage: str, params: dict, inputs: dict, result: dict) -> None:
    """Append one call to the receipt being written (no-op unless RLVR_RECEIPT is set).
    One line per write in append mode: concurrent tasks never interleave a line."""
    path = os.environ.get(RECEIPT_ENV)
    if not path:
        return
    line = json.dumps({"stage": stage, "params": params, "inputs": inputs, "cache_key": result["cache_key"],
                       "uri": result["uri"]}, sort_keys=True, default=str)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def begin(home: Path, sweep: str) -> Path:
    d = home / "receipts"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{sweep}.{uuid.uuid4().hex}.jsonl"
    tmp.write_text("")
    return tmp


def commit(home: Path, sweep: str, fp: str, tmp: Path) -> Path:
    """Keep the calls of a successful run (deduplicated, in first-call order), atomically."""
    calls: dict[tuple[str, str], dict] = {}
    for line in tmp.read_text(encoding="utf-8").splitlines():
        c = json.loads(line)
        calls.setdefault((c["stage"], c["cache_key"]), c)
    out = receipt_path(home, sweep)
    write_atomic(out, json.dumps({"sweep": sweep, "fingerprint": fp, "calls": list(calls.values())}, indent=1))
    tmp.unlink(missing_ok=True)
    return out


def all_cached(home: Path, sweep: str, fp: str) -> tuple[bool, str, int]:
    """(every recorded call would be a cache hit today, why not, number of calls)."""
    from components import lineage

    path = receipt_path(home, sweep)
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return False, "no receipt of an earlier successful run", 0
    if rec.get("fingerprint") != fp:
        return False, "the sweep file or the DAG wiring changed since the last successful run", 0
    calls = rec.get("calls") or []
    if not calls:
        return False, "empty receipt", 0
    for c in calls:
        try:
            key = lineage.cache_key_of(c["stage"], c["params"], c["inputs"])
        except Exception as e:  # noqa: BLE001 - any doubt means: run the DAG
            return False, f"{c['stage']}: {' '.join(str(e).split())[:120]}", 0
        if key != c["cache_key"]:
            return False, f"{c['stage']}: its cache key changed (stage code or defaults)", 0
        if lineage.cached(c["stage"], key) is None:
            return False, f"{c['stage']}: output {c['uri']} is no longer a verified cache entry", 0
    return True, "", len(calls)
