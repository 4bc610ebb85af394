"""The Airflow DAG is the stage graph emitted (components/stage_graph.py), for every sweep in
dags/sweeps in both executor modes (each file is also rendered with the other executor):

- its tasks are the graph's stages, each mapped stage's plan task, and the sweep run's
  start and end; each task depends on exactly the tasks that produce what the graph says
  it needs (a Kubernetes pod task on its plan task only);
- its tasks, run as a worker runs them with the XComs the DAG itself wires into them
  (tests/dag_files/airflow_walk.py), make exactly the graph's calls (per stage, in the graph's
  order of its cells), and a pod's `rlvr run-stage` arguments are those of its call. Results are
  placeholders whose URI is a hash of the call, so a call that differs anywhere also
  changes every input downstream of it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components import stage_graph
from components.k8s.stage_pods import run_stage_args
from components.sweep import load_sweep

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
SWEEPS = sorted((DAGS / "sweeps").glob("*.yaml"))
PARENT = "0123456789abcdef0123456789abcdef"   # the walk's start_sweep result
OTHER = {"local": "kubernetes", "kubernetes": "local"}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("walk")
    flipped = root / "flipped"
    flipped.mkdir()
    for f in SWEEPS:
        raw = yaml.safe_load(f.read_text())
        mode = OTHER[raw.get("executor", "local")]
        raw.update(name=f"{raw['name']}_{mode}", executor=mode)
        (flipped / f.name).write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RLVR_", "MLFLOW_"))}
    env.update({"AIRFLOW_HOME": str(root / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR", "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
                "RLVR_EXTRA_SWEEPS": str(flipped),
                "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("airflow_walk.py")), str(DAGS)], cwd=root,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["import_errors"] == {} and out["sweep_errors"] == {}, (out["import_errors"], out["sweep_errors"])
    return out


CASES = [(f, flip) for f in SWEEPS for flip in (False, True)]


def _dag(report: dict, sweep: Path, flip: bool) -> tuple[object, dict]:
    name = yaml.safe_load(sweep.read_text())["name"]
    d = report["dags"][f"rlvr_{name}" if not flip else f"rlvr_{name}_{OTHER[load_sweep(sweep).executor]}"]
    assert "error" not in d, d["error"]
    return load_sweep(d["file"]), d


def expected_upstream(mapped: dict[str, str], pods: bool) -> dict[str, list[str]]:
    """Each task's upstream ids, from the graph: what produces the results a stage needs."""
    out = {"start_sweep": [], "end_sweep": ["start_sweep", "tables"]}
    for st in stage_graph.STAGES:
        reads = {"start_sweep", *(stage_graph.PRODUCER[k] for k in st.needs)}
        if st.name in mapped:
            out[mapped[st.name]] = sorted(reads)
            out[st.name] = [mapped[st.name]] if pods else sorted(reads | {mapped[st.name]})
        else:
            out[st.name] = sorted(reads)
    return out


def by_stage(calls: list[dict]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for c in json.loads(json.dumps(calls)):   # as the walk's report holds them (YAML int keys as text)
        out.setdefault(c["stage"], []).append((c["cell"], c["params"], c["inputs"], c["extra"]))
    return out


@pytest.mark.parametrize("sweep, flip", CASES, ids=[f"{f.stem}-{'flipped' if x else 'as-is'}" for f, x in CASES])
def test_the_dag_is_the_graph_emitted(report, sweep, flip):
    cfg, d = _dag(report, sweep, flip)
    assert d["executor"] == cfg.executor
    pods = cfg.executor == "kubernetes"
    mapped = report["mapped"][cfg.executor]
    assert d["upstream"] == expected_upstream(mapped, pods)

    want, _ = stage_graph.walk(cfg, stage_graph.dry_result)
    assert sorted(by_stage(d["calls"])) == sorted(s.name for s in stage_graph.STAGES)   # every stage ran
    assert by_stage(d["calls"]) == by_stage(want)
    for c in d["calls"]:
        if "args" in c:   # a pod: its command line is its call's
            assert c["stage"] in mapped
            assert c["args"] == run_stage_args(c["stage"], c["params"], c["inputs"], sweep=cfg.name, parent=PARENT,
                                               extra=c["extra"] or None)
        else:
            assert (c["sweep"], c["parent"]) == (cfg.name, PARENT)
    assert all("args" in c for c in d["calls"] if c["stage"] in mapped) == pods
    assert any("args" in c for c in d["calls"]) == pods


def test_a_miswired_dag_is_seen(report):
    """The comparisons can fail: an input read from another model's result, or a dependency
    the graph does not have, breaks them."""
    cfg, d = _dag(report, DAGS / "sweeps" / "methods.yaml", False)
    want, _ = stage_graph.walk(cfg, stage_graph.dry_result)
    assert by_stage(d["calls"]) == by_stage(want)
    wrong = [dict(c) for c in d["calls"]]
    i = next(i for i, c in enumerate(wrong) if c["stage"] == "train")
    wrong[i]["inputs"] = {**wrong[i]["inputs"], "hard": wrong[i]["inputs"]["prefixes"]}
    assert by_stage(wrong) != by_stage(want)
    up = expected_upstream(report["mapped"]["local"], pods=False)
    assert {**d["upstream"], "tokens": ["start_sweep"]} != up
