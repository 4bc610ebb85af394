"""DAG integrity: every sweep file parses into a DAG with the expected shape, parsing
stays light (no torch / mlflow), and a broken sweep file is reported in one line
without breaking the others.

Airflow is configured from the environment when it is first imported, so each
DagBag is built in a fresh subprocess with its own AIRFLOW_HOME.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"

PROBE = textwrap.dedent("""
    import json, sys, time
    t0 = time.time()
    from airflow.dag_processing.dagbag import DagBag
    t1 = time.time()
    bag = DagBag(dag_folder=sys.argv[1])
    t2 = time.time()
    from airflow.sdk.definitions.mappedoperator import MappedOperator
    dags = {}
    for dag_id, d in bag.dags.items():
        dags[dag_id] = {
            "tags": sorted(d.tags), "description": d.description, "doc_md": d.doc_md,
            "params": {k: {"value": d.params[k], "schema": d.params.get_param(k).schema} for k in d.params},
            "tasks": {t.task_id: {"retries": t.retries, "mapped": isinstance(t, MappedOperator),
                                  "retry_delay": t.retry_delay.total_seconds(),
                                  "teardown": t.is_teardown, "setup": t.is_setup, "pool": t.pool,
                                  "pool_slots": t.pool_slots, "weight_rule": str(t.weight_rule),
                                  "upstream": sorted(t.upstream_task_ids)} for t in d.tasks}}
    heavy = [m for m in ("torch", "transformers", "mlflow", "vllm") if m in sys.modules]
    print(json.dumps({"dags": dags, "import_errors": bag.import_errors, "heavy": heavy,
                      "warnings": {k: list(v) for k, v in bag.captured_warnings.items()},
                      "airflow_import_s": t1 - t0, "parse_s": t2 - t1}))
""")


def probe(tmp_path: Path, extra: list[Path] = (), **more_env: str) -> dict:
    env = {**{k: v for k, v in os.environ.items() if k != "RLVR_ONLY_DAG"}, **more_env, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS), "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR",
           "RLVR_EXTRA_SWEEPS": os.pathsep.join(map(str, extra))}
    env.pop("RLVR_STAGE_OVERRIDES", None)
    out = subprocess.run([sys.executable, "-c", PROBE, str(DAGS)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\nairflow import {report['airflow_import_s']:.2f}s, DagBag parse of {DAGS}: {report['parse_s']:.2f}s")
    return report


def repo_sweeps():
    from components.sweep import SweepError, load_sweep
    files = sorted((DAGS / "sweeps").glob("*.y*ml"))
    out = []
    for f in files:
        try:
            out.append((f, load_sweep(f)))
        except SweepError as e:
            pytest.fail(str(e), pytrace=False)  # the one line: file: field: problem
    return out


EXPECTED = {"start_sweep", "prepare_data", "pretrain", "filter_hard", "seed_prefixes", "grid", "train",
            "eval_plan", "evaluate", "tokens", "tables", "end_sweep"}
STAGE_TASKS = {"prepare_data", "pretrain", "filter_hard", "seed_prefixes", "train", "evaluate", "tokens", "tables"}
K8S_EXTRA = {"filter_hard_args", "train_args"}  # kubernetes mode: the pods' argument builders


def test_dagbag(tmp_path):
    sweeps = repo_sweeps()
    assert sweeps, "no sweep files in dags/sweeps"
    r = probe(tmp_path)
    assert r["import_errors"] == {}, r["import_errors"]
    assert r["heavy"] == [], f"heavy modules imported at DAG parse time: {r['heavy']}"
    assert r["parse_s"] < 30
    assert sorted(r["dags"]) == sorted(f"rlvr_{s.name}" for _, s in sweeps), "one DAG per sweep file"
    for _, s in sweeps:
        d = r["dags"][f"rlvr_{s.name}"]
        tasks = d["tasks"]
        k8s = s.executor == "kubernetes"
        assert set(tasks) == ((EXPECTED - {"grid"}) | K8S_EXTRA if k8s else EXPECTED)  # k8s: train_args maps
        assert all(t["retries"] == s.retries for t in tasks.values())
        assert all(t["retry_delay"] == s.retry_delay_s for t in tasks.values())
        # the scheduler runs deeper tasks first: one sweep's evaluations before another's training
        assert {t["weight_rule"] for t in tasks.values()} == {"upstream"}
        assert tasks["train"]["mapped"] and tasks["evaluate"]["mapped"]
        assert not tasks["tables"]["mapped"] and not tasks["tokens"]["mapped"]
        # kubernetes mode: a pod task's only upstream is the task that builds its arguments
        train_inputs = tasks["train_args" if k8s else "train"]["upstream"]
        assert {"pretrain", "filter_hard", "seed_prefixes"} <= set(train_inputs)
        assert set(tasks["tables"]["upstream"]) >= {"evaluate", "tokens"}
        fh_inputs = tasks["filter_hard_args" if k8s else "filter_hard"]["upstream"]
        assert fh_inputs == ["prepare_data", "pretrain", "start_sweep"]
        if k8s:
            assert tasks["filter_hard"]["mapped"]  # one pod per model
            assert tasks["filter_hard"]["upstream"] == ["filter_hard_args"]
            assert tasks["train"]["upstream"] == ["train_args"]
        # end_sweep: a teardown without setups, so that clearing a failed task with its
        # downstream reruns end_sweep (the sweep's MLflow run is closed again) but never
        # start_sweep (the run keeps its parent run and sweep snapshot)
        assert tasks["end_sweep"]["teardown"] and not tasks["start_sweep"]["setup"]
        assert "tables" in tasks["end_sweep"]["upstream"]
        if not k8s:  # train is mapped over the grid task's cells, from the run's snapshot
            assert tasks["train"]["upstream"] == sorted(["filter_hard", "grid", "pretrain", "seed_prefixes",
                                                         "start_sweep"])
            assert tasks["grid"]["upstream"] == sorted(["filter_hard", "pretrain", "seed_prefixes", "start_sweep"])
        # trigger form: what a user changes per run, defaults from the file
        params = d["params"]
        assert set(params) == {"seeds", "methods", "rerun"}
        assert params["seeds"]["value"] == s.seeds and params["methods"]["value"] == s.methods
        assert params["methods"]["schema"]["items"]["enum"] == s.methods
        assert params["rerun"]["value"] is False
        assert all(t["pool"] == "default_pool" for t in tasks.values())      # no stage pool outside services


def test_broken_sweep_does_not_break_the_others(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nseeds: [0]\nmodels: [tiny]\nmodel_specs: {tiny: {}}\n"
                   "methods: [grpo]\nstages: {trian: {}}\n")
    good = tmp_path / "extra.yaml"
    good.write_text("name: extra\nseeds: [0, 1]\nmodels: [tiny]\nmodel_specs: {tiny: {}}\nmethods: [grpo]\n")
    r = probe(tmp_path, [bad, good])
    assert r["import_errors"] == {}
    assert "rlvr_demo" in r["dags"] and "rlvr_extra" in r["dags"]
    line = f"{bad}: stages.trian: unknown key"
    placeholder = r["dags"]["rlvr_invalid_broken"]
    assert placeholder["description"] == line and "invalid-sweep" in placeholder["tags"]
    warned = [w for ws in r["warnings"].values() for w in ws]
    assert any(line in w for w in warned), warned
    print("broken sweep reported as:", line)


def test_parse_imports_no_heavy_modules():
    """Importing the DAG file itself (as the scheduler does) stays light."""
    code = textwrap.dedent(f"""
        import importlib.util, sys, time
        t = time.time()
        spec = importlib.util.spec_from_file_location("rlvr_sweep_probe", {str(DAGS / 'rlvr_sweep.py')!r})
        mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
        dt = time.time() - t
        heavy = [m for m in ("torch", "transformers", "mlflow") if m in sys.modules]
        assert not heavy, heavy
        assert mod.SWEEP_ERRORS == {{}}, mod.SWEEP_ERRORS
        print(f"{{dt:.2f}}")
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("RLVR_EXTRA_SWEEPS",)}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    print(f"\nimport dags/rlvr_sweep.py (incl. airflow.sdk): {out.stdout.split()[-1]}s, no torch/mlflow")


def test_sweep_params_fit_the_real_stages(monkeypatch):
    """Each repo sweep's stage params validate against the real stages' Params models
    (what `rlvr sweep` checks before starting), so a typo fails here, not mid-DAG."""
    from components import lineage, stage_graph
    monkeypatch.delenv(lineage.OVERRIDES_ENV, raising=False)
    for f, s in repo_sweeps():
        for stage, params in stage_graph.planned_params(s):
            try:
                lineage.check_params(stage, params)
            except lineage.StageError as e:
                pytest.fail(f"{f}: stages.{stage}.{e.field}: {e.problem}", pytrace=False)


def test_only_dag_env_builds_one_sweep(tmp_path):
    """`rlvr sweep` sets RLVR_ONLY_DAG: dag.test() then parses and serialises one DAG, not all."""
    r = probe(tmp_path, RLVR_ONLY_DAG="rlvr_demo")
    assert set(r["dags"]) == {"rlvr_demo"} and not r["import_errors"]


def test_stage_pool_from_the_deployment(tmp_path):
    """Under `rlvr services` (RLVR_STAGE_POOL set) the compute stages take the pool's slots,
    as many as the threads the sweep gives the stage (the deployment's count when it sets
    none); the bookkeeping tasks stay in the default pool."""
    r = probe(tmp_path, RLVR_ONLY_DAG="rlvr_demo", RLVR_STAGE_POOL="rlvr_stages", RLVR_STAGE_POOL_SLOTS="2")
    tasks = r["dags"]["rlvr_demo"]["tasks"]
    heavy = {k for k, t in tasks.items() if t["pool"] == "rlvr_stages"}
    assert heavy == STAGE_TASKS
    stages = yaml.safe_load((REPO / "dags" / "sweeps" / "demo.yaml").read_text())["stages"]
    slots = {k: tasks[k]["pool_slots"] for k in heavy}
    assert slots == {k: 1 if (stages.get(k) or {}).get("threads") == 1 else 2 for k in heavy}, slots
    assert set(slots.values()) == {1, 2}                  # the demo has stages of both kinds
    assert all(tasks[k]["pool"] == "default_pool" for k in set(tasks) - heavy)
