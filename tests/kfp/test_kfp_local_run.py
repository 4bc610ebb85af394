"""The compiled pipeline of a tiny sweep, run end to end on this machine by kfp.local with the
real stages (a 1-layer policy, a few steps), twice; then a pipeline whose first stage fails.

kfp.local's own orchestrator runs the compiled PipelineSpec (placeholders, ParallelFor, the
fan-in, the exit handler, output files); each container step runs as a local process in this
environment, since kfp.local's SubprocessRunner refuses container components and there is
no Docker here (components/kfp/local.py says where and why). Checked: every stage ran once
and its artifact verifies; the MLflow store holds the stage runs under the parent run that
start-sweep opened and the exit handler closed; the rerun is all cache hits; a failing stage
fails the pipeline and the exit handler closes the parent run FAILED.
"""
import subprocess
import sys
from pathlib import Path

import pytest
from kfp_testlib import REPO, clean_env, last_json
from tiny_sweep import tiny_sweep

from components import lineage

pytestmark = pytest.mark.slow

PARTS = {"methods": ("grpo",), "pretrain": {"steps": 20, "batch_size": 32},
         "evaluate": {"seeds": [0], "pass_ks": [1, 2], "max_problems": 8}}
SWEEP = tiny_sweep("kfp_tiny", **PARTS)
STAGE_CALLS = {"prepare_data": 1, "pretrain": 1, "filter_hard": 1, "seed_prefixes": 1, "train": 1, "evaluate": 2,
               "tokens": 1, "tables": 1}


def _compile(kfp_python, sweep: Path, out: Path) -> None:
    r = subprocess.run([str(kfp_python), "-m", "components.kfp", "compile", str(sweep), "-o", str(out)], cwd=REPO,
                       env=clean_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def _run(kfp_python, pipeline: Path, home: Path) -> tuple[int, dict]:
    r = subprocess.run([str(kfp_python), "-m", "components.kfp", "run-local", str(pipeline), "--home", str(home),
                        "--bin", str(Path(sys.executable).parent)], cwd=REPO, env=clean_env(OMP_NUM_THREADS="1"),
                       capture_output=True, text=True, timeout=1500)
    return r.returncode, last_json(r.stdout)


@pytest.fixture(scope="module")
def runs(kfp_python, tmp_path_factory):
    root = tmp_path_factory.mktemp("kfp-e2e")
    (root / "kfp_tiny.yaml").write_text(SWEEP)
    _compile(kfp_python, root / "kfp_tiny.yaml", root / "kfp_tiny.pipeline.yaml")
    out = []
    for _ in range(2):
        rc, report = _run(kfp_python, root / "kfp_tiny.pipeline.yaml", root / "home")
        assert rc == 0 and report["ok"], report["error"]
        print(f"\nkfp.local run: {len(report['steps'])} steps in {report['seconds']:.1f}s")
        out.append(report)
    return root, out


def _mlflow(home: Path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    c = lineage.client()
    exp = c.get_experiment_by_name("kfp_tiny")
    return c, c.search_runs([exp.experiment_id], max_results=1000)


def test_every_stage_ran_once_and_verifies(runs):
    root, (first, _) = runs
    assert {s: len(r) for s, r in first["stages"].items()} == STAGE_CALLS
    results = [r for rs in first["stages"].values() for r in rs]
    assert not any(r["cached"] for r in results)
    for r in results:
        assert Path(r["uri"]).is_relative_to(root / "home" / "artifacts")
        assert lineage.verify_manifest(Path(r["uri"])), r["uri"]
    assert (Path(first["stages"]["tables"][0]["uri"]) / "tables.md").is_file()
    assert sorted(r["label"] for r in first["stages"]["evaluate"]) == ["tiny-base", "tiny-grpo-s0"]


def test_mlflow_runs_under_the_parent_the_exit_handler_closed(runs, monkeypatch):
    root, (first, second) = runs
    c, all_runs = _mlflow(root / "home", monkeypatch)
    parents = sorted((r for r in all_runs if r.data.tags.get("rlvr.kind") == "sweep"), key=lambda r: r.info.start_time)
    assert len(parents) == 2  # one per pipeline run
    assert all(p.info.status == "FINISHED" and p.data.tags["rlvr.airflow_run"].startswith("kfp/") for p in parents)
    stage_runs = [r for r in all_runs if "rlvr.stage" in r.data.tags]
    assert sorted(r.data.tags["rlvr.stage"] for r in stage_runs) == sorted(s for s, n in STAGE_CALLS.items()
                                                                          for _ in range(n))
    assert all(r.info.status == "FINISHED" for r in stage_runs)
    assert {r.data.tags.get("mlflow.parentRunId") for r in stage_runs} == {parents[0].info.run_id}
    assert {r.info.run_id for r in stage_runs} == {x["run_id"] for rs in first["stages"].values() for x in rs}


def test_rerun_is_all_cache_hits(runs):
    _, (first, second) = runs
    assert {s: len(r) for s, r in second["stages"].items()} == STAGE_CALLS
    recomputed = sorted(r["stage"] for rs in second["stages"].values() for r in rs if not r["cached"])
    # (a stage's key changes only with its code or params: an edit of the tree between the runs)
    assert not recomputed, f"recomputed on the rerun: {recomputed}"
    key = lambda r: (r["stage"], r["cache_key"])  # noqa: E731
    assert sorted((key(r), r["uri"], r["run_id"]) for rs in second["stages"].values() for r in rs) == \
        sorted((key(r), r["uri"], r["run_id"]) for rs in first["stages"].values() for r in rs)


def test_failing_stage_fails_the_pipeline_and_closes_the_parent(runs, kfp_python, monkeypatch):
    root, _ = runs
    bad = root / "kfp_tiny_bad.yaml"
    bad.write_text(tiny_sweep("kfp_tiny", **PARTS, prepare_data={"no_such_knob": 1}))
    _compile(kfp_python, bad, root / "bad.pipeline.yaml")  # the kfp compiler checks the sweep, not stage params
    rc, report = _run(kfp_python, root / "bad.pipeline.yaml", root / "home")
    assert rc == 0 and not report["ok"] and "prepare-data" in report["error"], report["error"]
    ran = [(s["cmd"][3] if s["cmd"][0] == "python" else s["cmd"][2], s["rc"]) for s in report["steps"]]
    assert ran == [("start-sweep", 0), ("plan", 0), ("prepare_data", 2), ("end-sweep", 0)]
    c, all_runs = _mlflow(root / "home", monkeypatch)
    parents = sorted((r for r in all_runs if r.data.tags.get("rlvr.kind") == "sweep"), key=lambda r: r.info.start_time)
    assert len(parents) == 3 and parents[-1].info.status == "FAILED"
