"""Dry run of a kubernetes sweep's GPU pods: no cluster, no DAG run, no stage executed.

    python -m components.k8s.dryrun [DAGS_FOLDER] [--all]

Builds every sweep DAG through a DagBag, as the scheduler does, then walks the GPU path
of each kubernetes sweep with placeholder upstream results (dicts shaped like what
``rlvr run-stage`` prints, with URIs under /rlvr/artifacts that do not exist):

- every GPU stage's plan task's own callable gives the mapped kwargs of every pod;
- the mapped operator renders itself with a stand-in task instance whose XCom is that
  list (``render_template_fields`` unmaps it, as a worker does), then the operator's
  ``build_pod_request_obj`` builds the Pod. By default only for the first and last pod
  of each GPU stage (the provider takes ~0.5 s a pod; what differs between a stage's
  pods is its mapped kwargs, all of which are in the report); ``--all`` renders all.

Prints one JSON report on its last stdout line (DAG shapes, mapped kwargs, Pods as the
API would receive them; ``pods[...][i]["pod"]`` can go to ``kubectl apply --dry-run=server``).
Airflow fixes its configuration at first import: run it in its own process with the
AIRFLOW_HOME you want. tests/k8s/test_k8s_dag.py checks its output.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from airflow.dag_processing.dagbag import DagBag

from components import stage_graph

RUN_ID = "manual__2025-01-01T00:00:00+00:00"
PARENT = "0123456789abcdef0123456789abcdef"
HEAVY = ("torch", "transformers", "mlflow", "vllm")


class StandInTI(SimpleNamespace):
    """What the mapped operator and the pod builder read from a task instance: its
    identity, and the upstream XCom (the plan task's list) through xcom_pull."""

    def xcom_pull(self, task_ids=None, key="return_value", default=None, map_indexes=None, **_):
        return self.xcoms[task_ids]


def render(dag, stage: str, kwargs_list: list[dict], args_task: str, every: bool = False) -> list[dict]:
    from kubernetes.client import ApiClient

    mapped = dag.get_task(stage)
    out = []
    for i in (range(len(kwargs_list)) if every else sorted({0, len(kwargs_list) - 1})):
        ti = StandInTI(dag_id=dag.dag_id, task_id=stage, map_index=i, try_number=1, run_id=RUN_ID,
                    xcoms={args_task: kwargs_list})
        ctx = {"ti": ti, "task": mapped, "run_id": RUN_ID, "dag": dag, "dag_run": SimpleNamespace(conf={}),
               "params": {}, "ds": "2025-01-01"}
        mapped.render_template_fields(ctx)  # unmaps into ctx["task"] and renders its template fields
        op = ctx["task"]
        pod = op.build_pod_request_obj(ctx, dry_run=True)
        out.append({
            "index": i, "pod": ApiClient().sanitize_for_serialization(pod),
            "map_index": dag.get_template_env().from_string(mapped.map_index_template).render(ctx),
            "operator": {"class": type(op).__name__, "do_xcom_push": op.do_xcom_push, "durable": op.durable,
                         "on_finish_action": op.on_finish_action.value, "retries": op.retries,
                         "retry_delay_s": op.retry_delay.total_seconds(), "get_logs": op.get_logs,
                         "startup_timeout_s": op.startup_timeout_seconds}})
    return out


def gpu_path(dag, cfg, mapped: dict[str, str], every: bool = False) -> dict:
    """Each GPU stage's pods, from its plan task's own callable given the upstream results of
    the graph's dry walk (``stage_graph.walk``: placeholder results, URIs that are a hash of
    each call); the plan tasks read the run's sweep snapshot, here the validated sweep file."""
    _, results = stage_graph.walk(cfg, stage_graph.dry_result)
    snap = cfg.model_dump(mode="json")
    upstream, args, pods = {}, {}, {}
    for st in stage_graph.STAGES:
        if st.name not in mapped:
            continue
        up = {k: results[k] for k in st.needs}
        kwargs = dag.get_task(mapped[st.name]).python_callable(parent=PARENT, sweep=snap, up=up)
        upstream[st.name], args[st.name] = up, kwargs
        pods[st.name] = render(dag, st.name, kwargs, mapped[st.name], every)
    from components.trainer.verl.cells import memory_report

    memory = memory_report(cfg)
    for text in memory["lines"]:
        print(f"[dryrun {dag.dag_id}] memory {text}")
    return {"memory": memory["cells"], "upstream": upstream, "args": args, "pods": pods}


def main(argv: list[str]) -> None:
    every = "--all" in argv
    folder = next((a for a in argv if not a.startswith("--")), str(Path(__file__).resolve().parents[2] / "dags"))
    t0 = time.time()
    bag = DagBag(dag_folder=folder)
    report = {"import_errors": {k: str(v)[-2000:] for k, v in bag.import_errors.items()},
              "heavy": [m for m in HEAVY if m in sys.modules], "parse_s": time.time() - t0, "dags": {}}
    from components.sweep import load_sweep
    mod = next(m for m in list(sys.modules.values()) if hasattr(m, "SWEEP_FILES") and hasattr(m, "build_dag"))
    for dag_id, dag in sorted(bag.dags.items()):
        entry = {"tags": sorted(dag.tags), "tasks": {t.task_id: {
            "class": type(t).__name__, "operator": getattr(getattr(t, "operator_class", None), "__name__", None),
            "mapped": bool(getattr(t, "is_mapped", False)), "upstream": sorted(t.upstream_task_ids),
            "setup": t.is_setup, "teardown": t.is_teardown, "map_index_template": t.map_index_template,
            "retries": t.retries} for t in dag.tasks}}
        if "kubernetes" in dag.tags and dag_id in mod.SWEEP_FILES:
            try:
                entry.update(gpu_path(dag, load_sweep(mod.SWEEP_FILES[dag_id]), mod.MAPPED["kubernetes"], every))
            except Exception as e:  # noqa: BLE001 - reported, the test decides
                entry["error"] = f"{type(e).__name__}: {e}"
        report["dags"][dag_id] = entry
    report["total_s"] = time.time() - t0
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
