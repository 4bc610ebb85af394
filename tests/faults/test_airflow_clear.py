"""One mapped task fails (injected); clearing it with its downstream in the same Airflow DAG
run (as the REST API / UI "Clear" does) reruns it and only what it blocked: every task that
had succeeded keeps its single try, every stage it needs is a cache hit, the failed
attempt's MLflow run stays FAILED and is never reused, the sweep's MLflow run ends FINISHED,
and the rerun uses the sweep as it was when the run started although the file was edited."""
from __future__ import annotations

import json
import subprocess
import sys

import toy_stages
from faults.conftest import REPO, make_home, stage_runs, subprocess_env

SWEEP = toy_stages.toy_sweep("clearfault", train={"steps": 2})


def test_clearing_the_failed_mapped_task_reruns_it_alone(tmp_path, monkeypatch):
    home = make_home(tmp_path / "rlvr")
    sweep = tmp_path / "clearfault.yaml"
    sweep.write_text(SWEEP)
    marker = tmp_path / "fail.txt"
    marker.write_text("vsr 0")
    calls = tmp_path / "calls.txt"
    overrides = {**toy_stages.OVERRIDES, "train": "faults.fault_stages:train"}
    env = subprocess_env(home, overrides, FAULT_FAIL_MARKER=str(marker), TOY_CALLS=str(calls))
    edited = tmp_path / "edited.yaml"                      # someone edits the file while the run is in flight
    edited.write_text(toy_stages.toy_sweep("clearfault", train={"steps": 3}))
    r = subprocess.run([sys.executable, str(REPO / "tests" / "faults" / "airflow_clear_driver.py"), str(sweep),
                        str(marker), str(edited)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    first, second = out["first"], out["second"]

    # run 1: exactly the injected task failed; what needs its result never ran
    failed = [k for k, (s, _) in first.items() if s == "failed"]
    assert failed == ["train[1]"]                           # grid order: grpo, vsr
    assert first["train[0]"] == ["success", 1]
    assert first["tables[-1]"][0] == "upstream_failed"
    # the clear took the failed task, what it blocked, and end_sweep (a teardown that had closed
    # the sweep run as FAILED); never start_sweep, the grid or a task that had succeeded
    assert first["end_sweep[-1]"] == ["success", 1]
    blocked = {k for k, (s, _) in first.items() if s in ("failed", "upstream_failed")}
    assert set(out["cleared"]) == blocked | {"end_sweep[-1]"}, out["cleared"]
    assert second["end_sweep[-1]"] == ["success", 2]

    # run 1 continued: everything succeeded; what had succeeded was not run again
    assert out["run_state"].endswith("success"), out
    assert all(s == "success" for s, _ in second.values()), second
    for k, (s, tries) in first.items():
        if s == "success" and k not in out["cleared"]:
            assert second[k][1] == tries == 1, k
    assert second["train[1]"][1] == 2                       # the cleared task's second try

    # stage executions: the upstream stages ran once in all; train ran for grpo, then vsr
    ran = calls.read_text().split()
    for stage in ("prepare_data", "pretrain", "filter_hard", "seed_prefixes"):
        assert ran.count(stage) == 1, (stage, ran)
    assert ran.count("train") == 2

    # MLflow: the failed attempt is FAILED, the rerun FINISHED under a different run id
    monkeypatch.setenv("RLVR_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    vsr = [x for x in stage_runs("train") if x.data.params.get("train.method") == "vsr"]
    assert sorted(x.info.status for x in vsr) == ["FAILED", "FINISHED"], [x.data.params for x in vsr]
    failed_run = next(x for x in vsr if x.info.status == "FAILED")
    done_run = next(x for x in vsr if x.info.status == "FINISHED")
    assert failed_run.info.run_id != done_run.info.run_id
    assert done_run.data.tags.get("rlvr.cache_key") == failed_run.data.tags.get("rlvr.cache_key")
    # the snapshot: the rerun trained with the sweep as triggered (steps 2), not the edited file
    assert done_run.data.params.get("train.steps", done_run.data.params.get("steps")) == "2"
    # one sweep run for the DAG run, closed FAILED by the first end_sweep, FINISHED after the clear
    sweeps = [x for x in stage_runs() if x.data.tags.get("rlvr.kind") == "sweep"]
    assert [x.info.status for x in sweeps] == ["FINISHED"]
    assert {x.data.tags.get("mlflow.parentRunId") for x in vsr} == {sweeps[0].info.run_id}
    # both closes on it, and its wall time spans both: first start to the rerun's end
    closes = json.loads(sweeps[0].data.tags["rlvr.closes"])
    assert [st for st, _ in closes] == ["FAILED", "FINISHED"] and closes[-1][1] == sweeps[0].info.end_time
    assert "closed 2 times: FAILED at " in sweeps[0].data.tags["rlvr.wall_time"]
    assert sweeps[0].data.metrics["sweep/wall_time_s"] == (sweeps[0].info.end_time - sweeps[0].info.start_time) / 1000
