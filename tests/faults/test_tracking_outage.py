"""A real MLflow tracking server killed (SIGKILL to its session) or hung while a stage logs to it.

1. It comes back mid-stage: the stage never blocks for long, what it logged meanwhile is
   spooled in its work dir and reaches the server while the stage still runs, the stage
   finishes, and every metric row is in MLflow exactly once.
2. It hangs (SIGSTOP: connections accepted, never answered) mid-stage: one call waits out its
   bounded timeout, the rest spool, and once it runs again every row is there exactly once.
3. It never comes back: the stage ends with its artifact complete and an error naming the
   spool and `rlvr tracking replay`; that command, once the server is up, finishes the run
   (metrics, outputs, FINISHED), and the next call of the stage is a cache hit.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import toy_stages
from components import artifacts
from faults.conftest import FAULT_STAGES, REPO, subprocess_env

pytestmark = pytest.mark.slow
PARAMS = {"steps": 12, "hold_at": 6, "interval_s": 0.2}
CHILD = """
import json, sys
from components import lineage
res = lineage.run_stage("ticker", json.loads(sys.argv[1]), sweep="outage")
print("RESULT " + json.dumps(res))
"""


class Server:
    """``mlflow server`` on a sqlite store in ``root``, in a session of its own."""

    def __init__(self, root: Path):
        self.root, self.port = root, _free_port()
        self.url, self.proc = f"http://127.0.0.1:{self.port}", None

    def start(self, timeout: float = 120) -> None:
        exe = Path(sys.executable).with_name("mlflow")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")},
               "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
        log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen(
            [str(exe), "server", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
             "--artifacts-destination", (self.root / "artifacts").as_uri(), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"], env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=self.root)
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None, (self.root / "server.log").read_text()[-3000:]
            time.sleep(0.3)
        raise AssertionError(f"mlflow server not healthy after {timeout}s")

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)   # the server and its workers: an outage, not a shutdown
        self.proc.wait(30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def server(tmp_path):
    root = tmp_path / "server"
    root.mkdir()
    toy_stages.premigrated_mlflow_db(root)   # the schema, without the server's ~8 s migration
    s = Server(root)
    s.start()
    yield s
    if s.proc.poll() is None:
        s.kill()


def _child(home: Path, server: Server, tmp: Path, **extra: str) -> subprocess.Popen:
    env = subprocess_env(home, {"ticker": FAULT_STAGES["ticker"]}, MLFLOW_TRACKING_URI=server.url,
                         FAULT_GATE=str(tmp / "gate"), FAULT_PROGRESS=str(tmp / "progress"),
                         RLVR_TRACKING_PROBE_S="1", **extra)
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(PARAMS)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_step(tmp: Path, n: int, child: subprocess.Popen, timeout: float = 180) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        p = tmp / "progress"
        text = p.read_text().strip() if p.exists() else ""
        if text and int(text) >= n:
            return time.monotonic() - t0
        assert child.poll() is None, child.communicate()
        time.sleep(0.05)
    raise AssertionError(f"the stage did not reach step {n} in {timeout}s")


def _ticker_run(url: str):
    from mlflow import MlflowClient
    c = MlflowClient(tracking_uri=url)
    exp = c.get_experiment_by_name("outage")
    runs = c.search_runs([exp.experiment_id], "tags.`rlvr.stage` = 'ticker'")
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return c, runs[0]


def _assert_every_row_once(c, run) -> None:
    rows = c.get_metric_history(run.info.run_id, "ticker/value")
    assert sorted((m.step, m.value) for m in rows) == [(s, s / 2) for s in range(1, PARAMS["steps"] + 1)], \
        [(m.step, m.value, m.timestamp) for m in rows]
    assert run.data.tags["ticker.half"] == "6" and run.data.params["ticker.half"] == "6"   # logged in the outage


def test_server_back_mid_stage_every_row_once(tmp_path, server):
    home = tmp_path / "home"
    child = _child(home, server, tmp_path)
    _wait_step(tmp_path, 3, child)
    server.kill()
    blocked = _wait_step(tmp_path, PARAMS["hold_at"], child)
    assert blocked < 30, f"steps 4-6 took {blocked:.0f}s with the server down (spooling must not block)"
    spool = list((home / "work" / "ticker").glob("*/tracking-spool/*.jsonl"))
    assert len(spool) == 1 and spool[0].read_text().count('"ticker/value"') >= 3, spool
    server.start()
    (tmp_path / "gate.1").touch()
    c, t_end = None, time.monotonic() + 60
    while time.monotonic() < t_end:   # replayed while the stage still runs (it waits at gate 2)
        c, run = _ticker_run(server.url)
        if len(c.get_metric_history(run.info.run_id, "ticker/value")) == PARAMS["steps"]:
            break
        time.sleep(0.5)
    assert run.info.status == "RUNNING" and child.poll() is None
    assert not spool[0].exists()
    (tmp_path / "gate.2").touch()
    out, err = child.communicate(timeout=180)
    assert child.returncode == 0, err[-3000:]
    assert "spooled" in err and "answers again" in err, err[-3000:]
    c, run = _ticker_run(server.url)
    assert run.info.status == "FINISHED"
    _assert_every_row_once(c, run)


def test_server_hung_mid_stage_every_row_once(tmp_path, server):
    """A server that holds its connections and never answers (SIGSTOP): one call waits out its
    bounded timeout, the rest spool without waiting; once it runs again, every row is stored
    once (a request it held may be stored then; the replay's copy of it adds nothing)."""
    home = tmp_path / "home"
    child = _child(home, server, tmp_path, RLVR_TRACKING_TIMEOUT_S="3", RLVR_TRACKING_RETRIES="0")
    _wait_step(tmp_path, 3, child)
    os.killpg(server.proc.pid, signal.SIGSTOP)
    try:
        blocked = _wait_step(tmp_path, PARAMS["hold_at"], child)
        assert blocked < 30, f"steps 4-6 took {blocked:.0f}s with the server hung (one bounded call, then spooling)"
        spool = list((home / "work" / "ticker").glob("*/tracking-spool/*.jsonl"))
        assert len(spool) == 1 and spool[0].read_text().count('"ticker/value"') >= 2, spool
    finally:
        os.killpg(server.proc.pid, signal.SIGCONT)
    (tmp_path / "gate.1").touch()
    (tmp_path / "gate.2").touch()
    out, err = child.communicate(timeout=180)
    assert child.returncode == 0, err[-3000:]
    assert "spooled" in err and "answers again" in err, err[-3000:]
    assert not spool[0].exists()
    c, run = _ticker_run(server.url)
    assert run.info.status == "FINISHED"
    _assert_every_row_once(c, run)


def test_server_never_back_then_rlvr_tracking_replay(tmp_path, server):
    home = tmp_path / "home"
    child = _child(home, server, tmp_path, RLVR_TRACKING_WAIT_S="3")
    _wait_step(tmp_path, PARAMS["hold_at"], child)
    server.kill()
    (tmp_path / "gate.1").touch()
    (tmp_path / "gate.2").touch()
    out, err = child.communicate(timeout=180)
    assert child.returncode != 0 and "TrackingUnavailable" in err, err[-3000:]
    spool = list((home / "work" / "ticker").glob("*/tracking-spool/*.jsonl"))
    assert len(spool) == 1 and f"rlvr tracking replay {spool[0]}" in err, (spool, err[-2000:])
    final = home / "artifacts" / "ticker" / spool[0].parents[1].name
    assert artifacts.verify_manifest(final) and (final / "ticks.json").is_file()   # the artifact is complete

    server.start()
    env = subprocess_env(home, {"ticker": FAULT_STAGES["ticker"]}, MLFLOW_TRACKING_URI=server.url)
    r = subprocess.run([sys.executable, "-m", "components.cli", "tracking", "replay"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and "record(s) sent to run" in r.stdout, (r.stdout, r.stderr[-3000:])
    assert not spool[0].exists()
    c, run = _ticker_run(server.url)
    assert run.info.status == "FINISHED" and run.data.tags["rlvr.output_uri"] == str(final)
    _assert_every_row_once(c, run)
    assert "ticks.json" in {a.path for a in c.list_artifacts(run.info.run_id)}   # the outputs, logged by replay

    again = subprocess.run([sys.executable, "-c", CHILD, json.dumps(PARAMS)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=180)
    res = json.loads(again.stdout.split("RESULT ", 1)[1])
    assert again.returncode == 0 and res["cached"] and res["run_id"] == run.info.run_id, again.stderr[-2000:]
    shutil.rmtree(home / "work", ignore_errors=True)


def test_a_refused_record_raises_and_is_not_spooled(home, tmp_path):
    """Only an outage is spooled: a value the server refuses (a param changed) fails the call."""
    from mlflow.exceptions import MlflowException

    from components import tracking
    c = tracking.client()
    run_id = c.create_run(tracking.ensure_experiment("refused")).info.run_id
    t = tracking.MlflowTracker(run_id, spool_dir=tmp_path / "spool")
    t.log_params({"a": 1})
    with pytest.raises(MlflowException, match="Changing param values is not allowed"):
        t.log_params({"a": 2})
    assert not (tmp_path / "spool").exists()
