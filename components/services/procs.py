"""Processes of the deployment: each service starts in a session of its own (``setsid``) so
that everything it forks (Airflow's executor workers, task processes in their own process
groups, gunicorn / uvicorn workers, PostgreSQL backends) stays in that session. ``pids.json``
records each leader's pid and start time; ``stop`` signals exactly those sessions and never
looks processes up by name.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from components.artifacts import write_atomic


def pid_file(services: Path) -> Path:
    return services / "pids.json"


def read_pids(services: Path) -> dict[str, dict]:
    f = pid_file(services)
    return json.loads(f.read_text()) if f.exists() else {}


def _write_pids(services: Path, pids: dict[str, dict]) -> None:
    write_atomic(pid_file(services), json.dumps(pids, indent=1, sort_keys=True))


def start(services: Path, name: str, argv: list[str], env: dict[str, str], user: str | None = None,
          stop_signal: int = signal.SIGTERM) -> dict:
    """Start ``argv`` as the leader of a new session; output to ``logs/<name>.log``."""
    logs = services / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.log", "ab") as log:
        log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} start: {' '.join(argv)}\n".encode())
        log.flush()
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, user=user, cwd=str(services))
    rec = {"pid": p.pid, "created": psutil.Process(p.pid).create_time(), "argv": argv,
           "stop_signal": int(stop_signal), "log": str(logs / f"{name}.log")}
    pids = read_pids(services)
    pids[name] = rec
    _write_pids(services, pids)
    return rec


def leader(rec: dict) -> psutil.Process | None:
    """The recorded leader if it is still that process (same pid AND start time)."""
    try:
        p = psutil.Process(rec["pid"])
        return p if abs(p.create_time() - rec["created"]) < 0.05 and p.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def members(rec: dict) -> list[psutil.Process]:
    """Every live process of the service's session (sid = the leader's pid), started no
    earlier than the leader: the leader and all it forked, even after the leader is gone."""
    out = []
    for p in psutil.process_iter(["pid", "create_time"]):
        try:
            if os.getsid(p.pid) == rec["pid"] and p.info["create_time"] >= rec["created"] - 0.05 \
                    and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def alive(rec: dict) -> bool:
    return leader(rec) is not None


def stop(services: Path, name: str, grace: float = 20.0) -> str:
    """Stop one service: its stop signal to the leader, then, after ``grace`` seconds,
    SIGKILL to whatever is left of its session. Returns what was done, in words."""
    pids = read_pids(services)
    rec = pids.get(name)
    if rec is None:
        return "not started"
    procs = members(rec)
    lead = leader(rec)
    if not procs:
        said = "already stopped"
    else:
        if lead is not None:
            lead.send_signal(rec.get("stop_signal", signal.SIGTERM))
        else:  # the leader died; its children still hold the session
            for p in procs:
                _signal(p, signal.SIGTERM)
        _, left = psutil.wait_procs(procs, timeout=grace)
        for p in left:
            _signal(p, signal.SIGKILL)
        psutil.wait_procs(left, timeout=5)
        said = f"stopped {len(procs)} process(es)" + (f", {len(left)} killed after {grace:.0f}s" if left else "")
    pids.pop(name, None)
    _write_pids(services, pids)
    return said


def _signal(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except psutil.Error:
        pass


def log_tail(path: str | Path, n: int = 4) -> str:
    """The last ``n`` non-empty lines of a log, on one line: what an error about a service says."""
    try:
        lines = [x for x in Path(path).read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return " | ".join(x.strip()[:300] for x in lines[-n:])
