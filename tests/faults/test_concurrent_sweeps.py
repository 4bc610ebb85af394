"""Two sweeps at the same time, in two processes, on ONE MLflow store and ONE artifact
root. They share their first four stages (same cache keys) and train different
methods. Both finish; each shared stage is computed once (the other process waits on
the key's lock, then takes the cache hit); no artifact or run is overwritten: every
FINISHED run's artifact verifies and its manifest names that very run."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import toy_stages
from components import lineage

from .conftest import TESTS, make_home, stage_runs, subprocess_env


def test_two_sweeps_share_a_store_without_overwrites(tmp_path, monkeypatch):
    home = make_home(tmp_path / "rlvr")
    calls = tmp_path / "calls.txt"
    env = subprocess_env(home, toy_stages.OVERRIDES, TOY_SLEEP="0.2", TOY_CALLS=str(calls))
    driver = str(Path(__file__).with_name("sweep_driver.py"))
    procs = [subprocess.Popen([sys.executable, driver, name, json.dumps(methods)], env=env, cwd=TESTS,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, methods in (("sweep_a", ["grpo", "vsr"]), ("sweep_b", ["vsr", "sft"]))]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    a, b = (json.loads(out.strip().splitlines()[-1]) for out, _ in outs)

    for shared_a, shared_b in zip(a[:4], b[:4]):               # same keys: one computation, one run
        assert (shared_a["uri"], shared_a["run_id"]) == (shared_b["uri"], shared_b["run_id"])
        assert sorted([shared_a["cached"], shared_b["cached"]]) == [False, True]
    assert a[5]["uri"] == b[4]["uri"]                          # vsr trained once for both
    ran = calls.read_text().split()
    assert sorted(ran) == sorted(["prepare_data", "pretrain", "filter_hard", "seed_prefixes",
                                  "train", "train", "train", "tokens", "tokens"])

    monkeypatch.setenv("RLVR_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    runs = [r for r in stage_runs() if "rlvr.stage" in r.data.tags]
    assert len(runs) == len(ran) and all(r.info.status == "FINISHED" for r in runs)
    assert len({r.data.tags["rlvr.output_uri"] for r in runs}) == len(runs)      # one artifact per run
    for r in runs:
        uri = r.data.tags["rlvr.output_uri"]
        assert lineage.verify_manifest(uri) and lineage.read_manifest(uri)["run_id"] == r.info.run_id
    assert {r.data.tags["rlvr.sweep"] for r in runs} <= {"sweep_a", "sweep_b"}
    parents = [r for r in stage_runs() if r.data.tags.get("rlvr.kind") == "sweep"]
    assert sorted(p.data.tags["rlvr.sweep"] for p in parents) == ["sweep_a", "sweep_b"]
    assert all(p.info.status == "FINISHED" for p in parents)
    leftovers = [p for p in (home / "artifacts").rglob("*") if ".tmp-" in p.name or ".old-" in p.name]
    assert leftovers == []
