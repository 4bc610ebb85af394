"""The scale tests: verl, vLLM (CPU build), Ray and SmolLM2, for real, in the scale
environment (``make scale-env`` -> ``.venv-scale``; ``make test-scale`` runs them).

Every test here is marked ``scale``. Outside that environment they are skipped at collection,
before any fixture is set up, with a reason naming the make target; ``make test-scale`` sets
``RLVR_REQUIRE_SCALE=1``, under which a missing environment fails the run instead (CI runs the
scale subset that way). Session fixtures share the expensive parts: one RLVR_HOME for the
session (so the lineage cache reuses a stage's output across tests), one short pretrain of
the tiny policy, one SmolLM2 export, and (``RLVR_SCALE_SHARED_RAY=1``) one Ray head that every
verl case joins as a job of its own (``shared_ray``).
"""
from __future__ import annotations

import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCALE_MODULES = ("vllm", "verl", "ray", "gguf")
MISSING = [m for m in SCALE_MODULES if importlib.util.find_spec(m) is None]
WHY = (f"needs the scale environment ({', '.join(MISSING)} not importable here): "
       "make scale-env, then make test-scale")


def pytest_collection_modifyitems(config, items):
    # A skip marker is evaluated before any fixture of the test is set up; the session- and
    # module-scoped fixtures here (SmolLM2 export, vLLM engine) would raise without the modules.
    here = [item for item in items if Path(str(item.fspath)).resolve().is_relative_to(HERE)]
    if MISSING and here and os.environ.get("RLVR_REQUIRE_SCALE"):
        raise pytest.UsageError(f"RLVR_REQUIRE_SCALE is set: {WHY}")
    for item in here:
        item.add_marker(pytest.mark.scale)
        if MISSING:
            item.add_marker(pytest.mark.skip(reason=WHY))


if os.environ.get("RLVR_SCALE_SHARED_RAY") == "1":
    # The shared head runs token auth, as a real cluster does, with a token of its own, for it and
    # every driver that joins it. Left to itself `ray start` turns token auth on when
    # ~/.ray/auth_token exists (an earlier local ray.init writes one) and a joining driver without
    # it is refused; Ray reads the mode once per process, so it is set before ray is imported.
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))


@pytest.fixture(scope="session")
def scale_home(tmp_path_factory):
    """One RLVR_HOME (store + MLflow) for the session; the model cache (GGUF exports) too.
    ``RLVR_SCALE_HOME`` names a directory kept across sessions instead (local reruns: the
    lineage cache then skips the stages already computed there)."""
    keep = os.environ.get("RLVR_SCALE_HOME")
    home = Path(keep) if keep else tmp_path_factory.mktemp("scale-home")
    home.mkdir(parents=True, exist_ok=True)
    old = {k: os.environ.get(k) for k in ("RLVR_HOME", "MLFLOW_TRACKING_URI", "RLVR_MODEL_CACHE")}
    os.environ["RLVR_HOME"] = str(home / "rlvr")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.setdefault("RLVR_MODEL_CACHE", str(home / "models"))
    yield home
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# The tiny policy's training pool at 4-5 terms and a pretrain long enough to solve them
# sometimes: after 300 steps x 64 (loss 0.06; ~200 s at 1 thread) T=1 pass rates at 64 tokens are
# .61 / .41 / .34 at 3 / 4 / 5 terms with 27 of 32 prompts between 0 and 1 at each level, so
# GRPO groups have mixed rewards. 150 steps (loss 0.36) left 4-5 % at every level, and the default
# pool (7-8 terms, traces of 60-90 tokens) under a 32-token budget made every verl reward 0.
# threads: 1 -- the 2-thread default ran ~8x slower per step on the loaded 2-core machine.
TINY_DATA = {"pretrain_size": 2000, "pool_size": 64, "heldout_pool_size": 16, "probe_per_level": 8,
             "pool_levels": {4: 0.5, 5: 0.5}}
TINY_PRETRAIN = {"steps": 300, "batch_size": 64, "warmup": 20, "lr": 3e-3, "threads": 1}


@pytest.fixture(scope="session")
def tiny_pretrained(scale_home):
    """(prepare_data result, pretrain result): the tiny policy after a short pretrain, cached
    in the session's store."""
    from components import lineage

    data = lineage.run_stage("prepare_data", TINY_DATA, {}, sweep="scale")
    pre = lineage.run_stage("pretrain", TINY_PRETRAIN, {"data": data["uri"]}, sweep="scale")
    return data, pre


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What `ray start --head --block` prints once its raylet has registered; and what it says when
# the raylet did not register in time (ray/_private/node.py), which a loaded 2-core machine
# causes: the raylet aborts when an agent's port file is late (a start-up race, retried, never a
# test result).
RAY_READY = "Ray runtime started"
RAY_SLOW = "timed out during startup"
AGENT_PORTS = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
               "metrics-export-port", "ray-client-server-port")


@pytest.fixture(scope="session")
def ray_head(scale_home):
    """One Ray head (GCS, raylet) for the session, in a process group of its own, with the
    resources every verl case declares (``run.ray_session``: the PPO pool's CPU units, the SFT
    pool's, one worker slot as a GPU); its address. Each verl case joins it as a job
    (``RAY_ADDRESS``) and leaving ends the job: Ray removes that job's actors and placement
    groups, so the next case gets the slots; the head's start-up and its start-up window are
    paid once."""
    from components.trainer.verl.run import CPU_RAY_UNITS
    from components.trainer.verl.sft import RAY_CPUS_PER_SLOT

    ray = Path(sys.executable).with_name("ray")
    env = {**os.environ, "RAY_prestart_worker_first_driver": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    for attempt in range(3):
        port = _free_port()
        log = scale_home / f"ray-head-{attempt}.log"
        cmd = [str(ray), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
               f"--num-cpus={max(CPU_RAY_UNITS, RAY_CPUS_PER_SLOT)}", "--num-gpus=1", "--include-dashboard=false",
               "--disable-usage-stats"]
        # fixed agent ports: with port 0 the raylet also waits (a fixed 30 s, node_manager.cc)
        # for the metrics agent to write its port to a file, which a slow agent start missed
        cmd += [f"--{name}={_free_port()}" for name in AGENT_PORTS]
        with log.open("w") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + 600
        while proc.poll() is None and RAY_READY not in log.read_text() and time.monotonic() < deadline:
            time.sleep(1)
        if proc.poll() is None and RAY_READY in log.read_text():
            break
        _stop(proc)
        if RAY_SLOW not in log.read_text():
            raise RuntimeError(f"ray start --head failed; {log}:\n{log.read_text()[-3000:]}")
    else:
        raise RuntimeError(f"ray start --head missed Ray's start-up window 3 times; {log}:\n{log.read_text()[-3000:]}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM: `ray start --block` then stops the processes it started; SIGKILL to its process
    group for anything left."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.fixture
def shared_ray(request, monkeypatch):
    """With ``RLVR_SCALE_SHARED_RAY=1`` (``make test-scale``), the test's verl runs join the
    session's Ray head (``run.ray_session`` with ``RAY_ADDRESS``); otherwise each run starts a
    Ray of its own, as a pod does (``make test-scale-ci``: two cases, nothing to share)."""
    if os.environ.get("RLVR_SCALE_SHARED_RAY") != "1":
        return None
    head = request.getfixturevalue("ray_head")
    monkeypatch.setenv("RAY_ADDRESS", head)
    return head
