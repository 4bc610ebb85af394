"""Session fixtures on a real deployment: ``rlvr services up`` (Airflow scheduler, dag-processor,
api-server, triggerer; MLflow server; PostgreSQL where installed) in a temporary RLVR_HOME on
free ports, and one tiny sweep (GRPO and VSR, real stages, real grader) run through it with
``rlvr sweep FILE --on-services``. Slow (minutes): only tests that ask for them start them,
once per session; ``rlvr services down --purge`` at the end stops exactly what was started and deletes its data.

Imported by tests/conftest.py so that every test directory (tests/browser, tests/services)
shares one deployment.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from tiny_sweep import tiny_sweep

REPO = Path(__file__).resolve().parents[2]
RLVR = [sys.executable, "-m", "components.cli"]
TINY_SWEEP = tiny_sweep("browser_tiny")


def free_port(lo: int, hi: int) -> int:
    """A port of [lo, hi] nothing listens on (the test sessions' assigned ranges)."""
    for port in range(lo, hi + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {lo}-{hi} on 127.0.0.1")


@dataclass
class Services:
    home: Path
    env: dict[str, str]
    airflow: str
    mlflow: str


@dataclass
class ServicesSweep:
    services: Services
    name: str
    dag_id: str
    run_id: str            # the Airflow DAG run
    output: str            # what `rlvr sweep --on-services` printed


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "RLVR_"))}
    env.update({"RLVR_HOME": str(home), "OMP_NUM_THREADS": "1"})
    return env


@pytest.fixture(scope="session")
def live_services(tmp_path_factory):
    """``RLVR_TEST_SERVICES_HOME``: use the deployment already running under that RLVR_HOME
    (neither started nor stopped here), e.g. while writing a test."""
    if existing := os.environ.get("RLVR_TEST_SERVICES_HOME"):
        import json
        home = Path(existing).resolve()
        cfg = json.loads((home / "services" / "config.json").read_text())
        yield Services(home, _env(home), f"http://127.0.0.1:{cfg['airflow_port']}",
                       f"http://127.0.0.1:{cfg['mlflow_port']}")
        return
    home = tmp_path_factory.mktemp("services") / "home"
    env = _env(home)
    lo = int(os.environ.get("RLVR_TEST_PORT_BASE", "5200"))
    mlflow, airflow = free_port(lo, lo + 49), free_port(lo + 50, lo + 89)
    pg = free_port(lo + 90, lo + 99)
    cmd = RLVR + ["services", "up", "--airflow-port", str(airflow), "--mlflow-port", str(mlflow),
                  "--pg-port", str(pg), "--timeout", "400"]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    try:
        assert r.returncode == 0, f"rlvr services up failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        yield Services(home, env, f"http://127.0.0.1:{airflow}", f"http://127.0.0.1:{mlflow}")
    finally:
        # --purge: as root the PostgreSQL data may live outside the temporary home (~postgres/rlvr-<id>)
        subprocess.run(RLVR + ["services", "down", "--purge"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=180)


@pytest.fixture(scope="session")
def services_sweep(live_services, tmp_path_factory):
    """The tiny GRPO + VSR sweep, run to the end on the deployment. On a deployment named by
    RLVR_TEST_SERVICES_HOME, its latest successful run of that sweep is reused if there is one."""
    if os.environ.get("RLVR_TEST_SERVICES_HOME") and (done := _latest_success(live_services, "rlvr_browser_tiny")):
        return ServicesSweep(live_services, "browser_tiny", "rlvr_browser_tiny", done, "")
    sweep = tmp_path_factory.mktemp("sweep") / "browser_tiny.yaml"
    sweep.write_text(TINY_SWEEP)
    r = subprocess.run(RLVR + ["sweep", str(sweep), "--on-services"], cwd=REPO, env=live_services.env,
                       capture_output=True, text=True, timeout=1800)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"rlvr sweep --on-services failed:\n{out[-4000:]}"
    m = re.search(r"triggered (\S+) run (\S+?):? ", out)
    assert m, f"no 'triggered <dag> run <run>' line in:\n{out[-2000:]}"
    return ServicesSweep(live_services, "browser_tiny", m.group(1), m.group(2), out)


def _latest_success(services: Services, dag_id: str) -> str | None:
    from components.services import remote
    af = remote.Airflow(services.airflow)
    runs = af.call("GET", f"/dags/{dag_id}/dagRuns", ok404=True,
                   params={"state": "success", "order_by": "-start_date", "limit": 1}) or {}
    return runs["dag_runs"][0]["dag_run_id"] if runs.get("dag_runs") else None
