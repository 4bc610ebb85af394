"""Airflow DAG factory: one DAG ``rlvr_<name>`` per sweep file.

Sweep files: ``dags/sweeps/*.yaml`` plus those listed in ``RLVR_EXTRA_SWEEPS``
(os.pathsep-separated files or directories of them; the ``rlvr sweep FILE`` CLI uses it for
files elsewhere, ``rlvr services`` for the directory of submitted sweeps; an extra file
whose ``name`` clashes with one in dags/sweeps replaces it).

The tasks are emitted from the stage graph (``components/stage_graph.py``): one task per
stage, in the graph's order, each reading the upstream results the graph says it needs and
getting its calls (params, inputs, cell) from ``stage_graph.calls``; this file adds no stage
logic of its own. A stage in ``MAPPED`` is a plan task listing the stage's cells plus one
mapped task instance per cell (dynamic task mapping); every other stage is one task that
makes all its calls. Around them, ``start_sweep`` and the teardown ``end_sweep`` open and
close the sweep's MLflow parent run.

A DAG run uses the sweep as it was when the run started: ``start_sweep`` snapshots it
(``components/sweep_runs.py``) and every task takes its settings, and the cells it maps
over, from that snapshot; the trigger form's params (seeds, methods, rerun) apply to it.

Parse-time rules (the scheduler re-parses this file every few seconds): import only
airflow.sdk, pydantic and yaml. Each task imports ``components.lineage`` (mlflow)
inside its body, and the stage modules (torch) are imported by run_stage only when
the stage really runs. Every stage task is a thin call of ``run_stage``; its cache makes
a retry or a cleared task cheap, and only small dicts (URIs, run ids) go to XCom.

``executor: kubernetes`` (``_pod_stages``): the GPU stages filter_hard, train and evaluate
are KubernetesPodOperator tasks running ``rlvr run-stage`` in the trainer image from the
pod template ``manifests/base/pod-templates/gpu-stage.yaml``, one pod per call
(``components/k8s/stage_pods.py`` builds the specs, the sweep's ``kubernetes:`` block
sizes them); their plan tasks build the pods' argument lists. Every other task (start/end
of the sweep run, prepare_data, pretrain = download or registration of a hub model,
seed_prefixes, tokens, tables, the plan tasks) stays a Python task: under Airflow's
KubernetesExecutor each task already gets its own worker pod in the pipeline image,
which mounts the same ``rlvr-artifacts`` volume at RLVR_HOME=/rlvr. The provider is
imported only when such a sweep is built.

A broken sweep file never breaks the others: its one-line SweepError is kept in
``SWEEP_ERRORS``, emitted as a parse warning, and shown as a placeholder DAG
``rlvr_invalid_<file stem>`` whose description is the error and whose single task
fails with it.
"""
from __future__ import annotations

import os
import re
import warnings
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import dag, get_current_context, get_parsing_context, task

from components import stage_graph
from components.sweep import Sweep, SweepError, load_sweep, sweep_digest

SWEEPS_DIR = Path(__file__).resolve().parent / "sweeps"
EXTRA_ENV = "RLVR_EXTRA_SWEEPS"
ONLY_ENV = "RLVR_ONLY_DAG"
POOL_ENV = "RLVR_STAGE_POOL"
SWEEP_ERRORS: dict[str, str] = {}   # sweep file -> one-line error
SWEEP_FILES: dict[str, str] = {}    # dag_id -> sweep file it came from
START = datetime(2025, 1, 1)
# The graph's stages that are mapped over their cells, each with the id of the plan task that
# lists them. Local mode maps the training runs and the evaluations (the long units, each
# retried and cleared on its own) and runs a per-model stage as one task; Kubernetes mode
# runs every call of a GPU stage as its own pod.
MAPPED = {"local": {"train": "grid", "evaluate": "eval_plan"},
          "kubernetes": {"filter_hard": "filter_hard_args", "train": "train_args", "evaluate": "eval_plan"}}


def _yaml_in(d: Path) -> list[Path]:
    return sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml"))


def sweep_files() -> list[Path]:
    files = _yaml_in(SWEEPS_DIR)
    extra: list[Path] = []
    for p in os.environ.get(EXTRA_ENV, "").split(os.pathsep):
        if p:  # a directory stands for its sweep files (the services' submitted sweeps)
            p = Path(p).expanduser().resolve()
            extra += _yaml_in(p) if p.is_dir() else [p]
    return files + [p for p in extra if p not in files]


def dag_id_for(name: str) -> str:
    return f"rlvr_{name}"


def _stage(c: dict, sweep: str, parent: str | None) -> dict:
    """Run one call of the graph in this worker; its result labelled with its cell."""
    from airflow.sdk.exceptions import AirflowFailException

    from components.lineage import StageError, run_stage
    from components.receipts import record
    # DAG run conf / trigger form {"rerun": true} (``rlvr sweep --rerun``) recomputes despite
    # the cache; only on the first try, so that a retry still reuses what finished.
    ctx = get_current_context()
    force = bool((ctx.get("params") or {}).get("rerun")) and ctx["ti"].try_number <= 1
    try:
        result = run_stage(c["stage"], c["params"], c["inputs"], sweep=sweep, parent_run_id=parent, force=force,
                           cell=c["extra"])
    except StageError as e:  # bad params / missing input: retrying cannot help
        raise AirflowFailException(str(e)) from None
    record(c["stage"], c["params"], c["inputs"], result)   # for `rlvr sweep`'s cached-rerun check
    return stage_graph.labelled(result, c)


def _resolved(up: dict) -> dict:
    """Upstream results as the graph reads them. A mapped task's results arrive as a lazy XCom
    sequence; one slice is one request, where iterating probes past the end and logs a
    spurious "XCom not found" error."""
    return {k: v if isinstance(v, dict) else list(v[:]) for k, v in up.items()}


def _stage_slots(cfg: Sweep, stage: str) -> dict:
    """Pool of the compute stages when the deployment defines one (``rlvr services`` sets
    RLVR_STAGE_POOL to a pool of <cores> slots and RLVR_STAGE_POOL_SLOTS to the threads a
    stage uses by default): parallel stage tasks never oversubscribe the cores, while the
    small bookkeeping tasks run beside them. A stage whose sweep entry sets fewer ``threads``
    takes that many slots (a one-thread study runs a stage per core). Elsewhere (dag.test,
    Kubernetes) the default pool."""
    pool = os.environ.get(POOL_ENV)
    if not pool:
        return {}
    default = int(os.environ.get(POOL_ENV + "_SLOTS") or 1)
    threads = getattr(cfg.stages, stage, {}).get("threads")
    return {"pool": pool, "pool_slots": min(int(threads), default) if threads else default}


def _cfg(snapshot: dict) -> Sweep:
    """The run's sweep, from start_sweep's snapshot (never from the file: it may have changed)."""
    return Sweep.model_validate(snapshot)


def _params(cfg: Sweep) -> dict:
    """What a user changes per run, in the trigger form; start_sweep validates the result
    with the sweep model (components/sweep_runs.py)."""
    from airflow.sdk import Param
    return {
        "seeds": Param(list(cfg.seeds), type="array", items={"type": "integer"}, minItems=1, uniqueItems=True,
                       title="Training seeds", description="one training run per model x method x seed"),
        "methods": Param(list(cfg.methods), type="array", items={"type": "string", "enum": list(cfg.methods)},
                         minItems=1, uniqueItems=True, title="Methods",
                         description="a subset of the sweep's methods to train and evaluate in this run"),
        "rerun": Param(False, type="boolean", title="Recompute",
                       description="recompute every stage, ignoring the cache (first try of each task)"),
    }


def build_dag(cfg: Sweep, source: Path):
    name = cfg.name
    raw = cfg.model_dump(mode="json")
    mapped = MAPPED[cfg.executor]

    @dag(dag_id=dag_id_for(name), schedule=None, start_date=START, catchup=False,
         description=(cfg.description or f"RLVR sweep {name}")[:200],
         doc_md=f"Sweep file: `{source}` (sweep digest `{sweep_digest(cfg)}`)\n\nGrid: {len(cfg.grid())} "
                f"training runs ({', '.join(g['key'] for g in cfg.grid())}).\n\nEach run uses the sweep as "
                "it was when the run started (snapshot in `start_sweep` and the MLflow sweep run).",
         tags=["rlvr", cfg.executor], params=_params(cfg),
         # weight_rule upstream: a task deeper in the graph goes first, so a running sweep's
         # evaluations and tables are not queued behind a later sweep's (or cell's) training
         default_args={"retries": cfg.retries, "retry_delay": timedelta(seconds=cfg.retry_delay_s),
                       "weight_rule": "upstream"})
    def sweep_dag():
        @task(multiple_outputs=True)
        def start_sweep() -> dict:
            """Snapshot the sweep for this DAG run (conf "sweep" from ``rlvr sweep``, else the
            file as parsed now), apply the trigger-form params, open the MLflow parent run."""
            from airflow.sdk.exceptions import AirflowFailException

            from components.sweep_runs import apply_params, open_sweep_run
            ctx = get_current_context()
            conf = getattr(ctx.get("dag_run"), "conf", None) or {}
            where = f"{dag_id_for(name)} run {ctx['run_id']}"
            try:
                snap = apply_params(conf.get("sweep") or raw, ctx.get("params") or {}, where)
            except SweepError as e:
                raise AirflowFailException(str(e)) from None
            if snap.name != name:
                raise AirflowFailException(f"{where}: conf.sweep: name {snap.name!r} is not this DAG's sweep {name!r}")
            parent, stored = open_sweep_run(name, snap.model_dump(mode="json"), f"{dag_id_for(name)}/{ctx['run_id']}")
            _cfg(stored)
            return {"parent": parent, "sweep": stored}

        @task
        def end_sweep() -> str:
            # A teardown without setups: runs once everything upstream is done, also after a
            # failure (so the parent run is closed), and does not decide the DAG run's state.
            # Clearing a failed task with its downstream clears it too, so the rerun closes
            # the parent run again, FINISHED when 'tables' then succeeds.
            from components.lineage import end_sweep_run
            ti = get_current_context()["ti"]
            parent = ti.xcom_pull(task_ids="start_sweep", key="parent")
            if not parent:  # start_sweep failed: there is no sweep run to close
                return "no sweep run"
            done = ti.xcom_pull(task_ids="tables")
            status = "FINISHED" if done else "FAILED"
            end_sweep_run(parent, status, tables=done)   # the results table and winner on the sweep's run
            return status

        start = start_sweep()
        parent, snap = start["parent"], start["sweep"]
        pods = _pod_stages(cfg) if cfg.executor == "kubernetes" else None
        results: dict = {}
        for st in stage_graph.STAGES:
            up = {k: results[k] for k in st.needs}
            if pods is not None and st.name in mapped:
                results[st.result] = pods(st.name, mapped[st.name], parent, snap, up)
            elif st.name in mapped:
                cells = _plan_task(st.name, mapped[st.name])(sweep=snap, up=up)
                results[st.result] = _mapped_task(name, st.name, _stage_slots(cfg, st.name)).partial(
                    parent=parent, sweep=snap, up=up).expand(cell=cells)
            else:
                results[st.result] = _stage_task(name, st.name, _stage_slots(cfg, st.name))(parent=parent, sweep=snap, up=up)
        end = end_sweep()
        start >> end
        results["tables"] >> end
        end.as_teardown()

    return sweep_dag()


def _stage_task(sweep_name: str, stage: str, heavy: dict):
    """Every call of ``stage`` in one task: one result, or the list of its models' results.
    One task even with several models: the cache keeps a retry from recomputing the models
    that already finished."""
    @task(task_id=stage, **heavy)
    def run(parent: str, sweep: dict, up: dict):
        cs = stage_graph.calls(_cfg(sweep), stage, _resolved(up))
        return stage_graph.collect(stage, [_stage(c, sweep_name, parent) for c in cs])
    return run


def _plan_task(stage: str, task_id: str):
    @task(task_id=task_id)
    def plan(sweep: dict, up: dict) -> list[str]:
        """The cells of the mapped stage, in the graph's order: its map."""
        return [c["cell"] for c in stage_graph.calls(_cfg(sweep), stage, _resolved(up))]
    return plan


def _mapped_task(sweep_name: str, stage: str, heavy: dict):
    @task(task_id=stage, map_index_template="{{ rlvr_key }}", **heavy)
    def run(cell: str, parent: str, sweep: dict, up: dict) -> dict:
        get_current_context()["rlvr_key"] = cell  # readable map index in the UI
        return _stage(stage_graph.call_for(_cfg(sweep), stage, _resolved(up), cell), sweep_name, parent)
    return run


def _pod_stages(cfg: Sweep):
    """Kubernetes mode: a GPU stage is a KubernetesPodOperator mapped over one pod per call.
    The pods' argument lists need the upstream artifact URIs, so a small plan task builds
    them at run time from the run's sweep snapshot; each pod's result comes back through the
    XCom sidecar, labelled with its cell (``--extra``). The pods' settings (image,
    resources) are the parse-time sweep's: they shape the operators."""
    from airflow.sdk.exceptions import AirflowFailException

    from components.k8s import stage_pods  # the provider and the kubernetes client: kubernetes sweeps only

    name, ks = cfg.name, cfg.kubernetes
    pod_op = stage_pods.operator_class()

    def emit(stage: str, task_id: str, parent, snap, up: dict):
        @task(task_id=task_id)
        def plan(parent: str, sweep: dict, up: dict) -> list[dict]:
            """One pod's mapped kwargs per call of the stage."""
            try:  # fail here, in a CPU worker, not as an empty pod on a GPU node
                stage_pods.check_template(ks)
            except stage_pods.PodSpecError as e:
                raise AirflowFailException(f"{name}: {e}") from None
            return [stage_pods.pod_kwargs(ks, stage, c["params"], c["inputs"], sweep=name, parent=parent,
                                          cell=c["cell"], extra=c["extra"])
                    for c in stage_graph.calls(_cfg(sweep), stage, _resolved(up))]

        pods = pod_op.partial(**stage_pods.partial_kwargs(ks, stage))
        return pods.expand_kwargs(plan(parent=parent, sweep=snap, up=up)).output  # the XComArg of all mapped results

    return emit


def _invalid_dag(path: Path, message: str):
    dag_id = "rlvr_invalid_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem)

    @dag(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["rlvr", "invalid-sweep"],
         description=message[:200], doc_md=f"**Invalid sweep file**\n\n`{message}`")
    def invalid():
        @task(retries=0)
        def invalid_sweep():
            raise SweepError(message)

        invalid_sweep()

    return invalid()


def build_all() -> dict[str, object]:
    SWEEP_ERRORS.clear()
    SWEEP_FILES.clear()
    # a worker running one task needs one DAG only; so does `rlvr sweep` (RLVR_ONLY_DAG), whose
    # dag.test() would otherwise parse and serialise every sweep's DAG on each run
    wanted = get_parsing_context().dag_id or os.environ.get(ONLY_ENV)
    sweeps: dict[str, tuple[Sweep, Path]] = {}
    out: dict[str, object] = {}
    for path in sweep_files():
        try:
            cfg = load_sweep(path)
        except SweepError as e:
            SWEEP_ERRORS[str(path)] = str(e)
            warnings.warn(str(e), UserWarning, stacklevel=1)
            d = _invalid_dag(path, str(e))
            out[d.dag_id] = d
            continue
        if cfg.name in sweeps and path.parent == SWEEPS_DIR:
            msg = f"{path}: name: sweep name '{cfg.name}' already used by {sweeps[cfg.name][1]}"
            SWEEP_ERRORS[str(path)] = msg
            warnings.warn(msg, UserWarning, stacklevel=1)
            continue
        sweeps[cfg.name] = (cfg, path)  # an extra file may replace a same-named sweep
    for name, (cfg, path) in sweeps.items():
        did = dag_id_for(name)
        SWEEP_FILES[did] = str(path)
        if wanted and wanted != did:
            continue
        out[did] = build_dag(cfg, path)
    return out


# Module-level names are what Airflow's DagBag collects.
for _id, _dag in build_all().items():
    globals()[_id] = _dag
