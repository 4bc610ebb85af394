"""kill -9 of a REAL training stage (`rlvr run-stage train` in a subprocess) at a seeded
random checkpoint, then a rerun: it resumes from the last checkpoint and ends exactly
where an uninterrupted run with the same seed ends (weights, method state, token
meter, metric history), for methods whose state matters: VSR's buffer, GRESO's skip
histories, VIP's posterior. The rerun continues the killed attempt's MLflow run (one run per
training cell, one value per step, the attempts in its tags); only the finished run is a cache hit."""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components import lineage

from .conftest import FAULT_STAGES, make_home, subprocess_env

STEPS = 5
METHODS = {
    "vsr": {"n": 4, "rho": 0.5},
    "greso": {"n": 4},
    "vip": {"budget_per_prompt": 4, "embedder": "hashing"},
}


def train_params(method: str) -> dict:
    return {"method": method, "method_config": METHODS[method], "steps": STEPS, "batch_prompts": 4,
            "max_new_tokens": 12, "val_size": 4, "val_samples": 2, "val_every": 2, "ckpt_every": 1,
            "threads": 1, "lr": 1e-3, "seed": 3}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """One input artifact (model + hard set + traces) in a module-wide store."""
    root = tmp_path_factory.mktemp("kill")
    mp = pytest.MonkeyPatch()
    mp.setenv("RLVR_HOME", str(make_home(root / "ref")))
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)
    mp.delenv(lineage.OVERRIDES_ENV, raising=False)
    saved = dict(lineage.STAGES)
    lineage.register_stage("train_inputs", FAULT_STAGES["train_inputs"])
    res = lineage.run_stage("train_inputs", {}, {})
    yield root, {"model": res["uri"], "hard": res["uri"], "prefixes": res["uri"]}
    lineage.STAGES.clear()
    lineage.STAGES.update(saved)
    mp.undo()


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _outcome(uri: str) -> dict:
    d = Path(uri)
    hist = [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")}
            for x in (d / "metrics.jsonl").read_text().splitlines()]
    return {"weights": _sha(d / "model" / "model.safetensors"), "history": hist,
            "method_state": json.loads((d / "method_state.json").read_text()),
            "tokens": json.loads((d / "tokens.json").read_text()),
            "summary": json.loads((d / "summary.json").read_text())}


def _kill_at_checkpoint(home: Path, params: dict, inputs: dict, step: int, timeout: float = 120.0) -> int:
    """Start `rlvr run-stage train` and SIGKILL its whole process group (the CLI and its
    grader workers) as soon as checkpoint ``step`` is on disk. Returns the last completed
    step seen at the kill."""
    cmd = [sys.executable, "-m", "components.cli", "run-stage", "train",
           "--params", json.dumps(params), "--inputs", json.dumps(inputs)]
    proc = subprocess.Popen(cmd, env=subprocess_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    want = f"step-{step:06d}/trainer_state.json"
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if list((home / "work" / "train").glob(f"*/checkpoints/{want}")):
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.01)
    finally:
        if proc.poll() is None and time.monotonic() >= deadline:
            os.killpg(proc.pid, signal.SIGKILL)
        err = proc.communicate()[1].decode(errors="replace")
    assert proc.returncode == -signal.SIGKILL, f"not killed (rc {proc.returncode}): {err[-2000:]}"
    done = sorted((home / "work" / "train").glob("*/checkpoints/step-*/trainer_state.json"))
    return int(done[-1].parent.name.removeprefix("step-"))


@pytest.mark.parametrize("method", sorted(METHODS))
def test_kill9_then_rerun_resumes_and_matches_uninterrupted(method, inputs, monkeypatch, capfd):
    root, ins = inputs
    params = train_params(method)
    # the uninterrupted reference, in a store of its own
    monkeypatch.setenv("RLVR_HOME", str(make_home(root / f"ref-{method}")))
    ref = lineage.run_stage("train", params, ins)

    home = make_home(root / f"killed-{method}")
    kill_step = random.Random(f"kill-{method}").randrange(0, STEPS - 2)  # leaves >= 2 steps to do
    last_done = _kill_at_checkpoint(home, params, ins, kill_step)
    assert kill_step <= last_done < STEPS - 1
    monkeypatch.setenv("RLVR_HOME", str(home))
    final = home / "artifacts" / "train" / ref["cache_key"]
    assert not final.exists()                                    # nothing marked finished
    dead = [r for r in lineage.client().search_runs(
        [lineage.ensure_experiment("default")], f"tags.`rlvr.cache_key` = '{ref['cache_key']}'")]
    assert [r.info.status for r in dead] == ["RUNNING"]          # it could not close its own run

    capfd.readouterr()
    again = lineage.run_stage("train", params, ins)
    out = capfd.readouterr()
    assert again["cached"] is False and again["cache_key"] == ref["cache_key"]
    resumed = [ln for ln in (out.out + out.err).splitlines() if "resumed from" in ln]
    assert resumed and f"step-{last_done:06d}" in resumed[0], out.out[-2000:]
    got = _outcome(again["uri"])
    assert got == _outcome(ref["uri"])
    assert any(h.get("train/grad_norm", 0) > 0 for h in got["history"])  # real updates were resumed
    # the rerun continued the killed attempt's run: one FINISHED run, one value per step, two attempts
    c = lineage.client()
    runs = c.search_runs([lineage.ensure_experiment("default")], f"tags.`rlvr.cache_key` = '{ref['cache_key']}'")
    assert [r.info.run_id for r in runs] == [dead[0].info.run_id] == [again["run_id"]]
    run = runs[0]
    assert run.info.status == "FINISHED" and run.data.tags["rlvr.attempt"] == "2", run.data.tags
    assert run.data.tags["rlvr.attempt.1"].startswith("RUNNING: died") and "rlvr.error" not in run.data.tags
    assert f"resumed from step-{last_done:06d}" in run.data.tags["rlvr.attempt.2"]
    for key in ("reward/mean", "train/loss"):
        steps = sorted(m.step for m in c.get_metric_history(run.info.run_id, key))
        assert steps == list(range(1, STEPS + 1)), (key, steps)
    assert lineage.run_stage("train", params, ins)["run_id"] == again["run_id"]
