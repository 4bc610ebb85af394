"""Every sweep DAG's tasks run as a worker runs them, without running a stage (main env):

    python tests/dag_files/airflow_walk.py DAGS_FOLDER     (AIRFLOW_HOME of your own; last line JSON)

Builds the DAGs through a DagBag, as the scheduler does, then runs each task in dependency
order with the arguments the DAG itself wires into it: every XComArg in a task's kwargs (a
mapped task's partial and expanded kwargs) is resolved from the outputs of the tasks it
names, as Airflow resolves it. So a task that reads the wrong upstream result, or a cell
mapped from the wrong plan, shows in the calls. ``_stage`` (the in-process ``run_stage``
call) is replaced by a recorder returning ``stage_graph.dry_result``; a Kubernetes pod's
call is read back from its mapped kwargs (its ``rlvr run-stage`` arguments), its result again
``dry_result`` of that call. ``start_sweep`` (MLflow) gives a fixed parent run id and the
sweep file's snapshot; ``end_sweep`` is not run.

Report per DAG: its executor, every task's upstream ids, and the stage calls in the order
they were made (each with the pod's arguments where a pod makes it).
"""
from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.xcom_arg import PlainXComArg

from components import stage_graph

PARENT = "0123456789abcdef0123456789abcdef"


def _opt(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def _resolve(value, outputs: dict):
    if isinstance(value, PlainXComArg):
        out = outputs[value.operator.task_id]
        return out if value.key == "return_value" else out[value.key]
    if isinstance(value, dict):
        return {k: _resolve(v, outputs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_resolve(v, outputs) for v in value]
    return value


def _order(dag) -> list:
    done: list[str] = []
    todo = dict(dag.task_dict)
    while todo:
        ready = [t for t, op in todo.items() if set(op.upstream_task_ids) <= set(done)]
        if not ready:
            raise RuntimeError(f"{dag.dag_id}: a cycle among {sorted(todo)}")
        done += sorted(ready)
        for t in ready:
            del todo[t]
    return [dag.task_dict[t] for t in done]


def walk(dag, mod, cfg) -> dict:
    calls: list[dict] = []

    def record(c, sweep, parent):
        calls.append({**c, "sweep": sweep, "parent": parent})
        return stage_graph.labelled(stage_graph.dry_result(c), c)

    def pod(kw: dict) -> dict:
        a = kw["arguments"]
        c = stage_graph.call(a[1], kw["annotations"]["rlvr/cell"], json.loads(_opt(a, "--params")),
                             json.loads(_opt(a, "--inputs")), json.loads(_opt(a, "--extra") or "{}"))
        calls.append({**c, "args": a})
        return stage_graph.labelled(stage_graph.dry_result(c), c)

    ctx = {"params": {"rerun": False, "seeds": list(cfg.seeds), "methods": list(cfg.methods)},
           "ti": SimpleNamespace(try_number=1), "dag_run": SimpleNamespace(conf={})}
    mod._stage = record
    mod.get_current_context = lambda: ctx
    outputs: dict = {"start_sweep": {"parent": PARENT, "sweep": cfg.model_dump(mode="json")}}
    for op in _order(dag):
        tid = op.task_id
        if tid in ("start_sweep", "end_sweep"):
            continue
        if not getattr(op, "is_mapped", False):
            outputs[tid] = op.python_callable(**_resolve(op.op_kwargs, outputs))
            continue
        expanded = _resolve(op._get_specified_expand_input().value, outputs)
        if isinstance(expanded, dict):   # a mapped Python task: .partial(...).expand(cell=...)
            [(arg, items)] = expanded.items()
            fn, partial = op.python_callable, _resolve(op.partial_kwargs["op_kwargs"], outputs)
            outputs[tid] = [fn(**partial, **{arg: item}) for item in items]
        else:                             # a mapped pod operator: .expand_kwargs(plan)
            outputs[tid] = [pod(kw) for kw in expanded]
    return {"executor": cfg.executor, "calls": calls,
            "upstream": {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}}


def main(folder: str) -> None:
    bag = DagBag(dag_folder=folder)
    mod = next(m for m in list(sys.modules.values()) if hasattr(m, "SWEEP_FILES") and hasattr(m, "build_dag"))
    from components.sweep import load_sweep
    out = {"import_errors": {k: str(v)[-500:] for k, v in bag.import_errors.items()},
           "sweep_errors": dict(mod.SWEEP_ERRORS), "mapped": mod.MAPPED, "dags": {}}
    for dag_id, path in sorted(mod.SWEEP_FILES.items()):
        try:
            out["dags"][dag_id] = {"file": path, **walk(bag.dags[dag_id], mod, load_sweep(path))}
        except Exception as e:  # noqa: BLE001 - reported per DAG; the tests decide
            out["dags"][dag_id] = {"file": path, "error": f"{type(e).__name__}: {' '.join(str(e).split())}"}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
