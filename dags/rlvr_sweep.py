"""Airflow DAG factory: one DAG ``rlvr_<name>`` per sweep file.

Sweep files: ``dags/sweeps/*.yaml`` plus those listed in ``RLVR_EXTRA_SWEEPS``
(os.pathsep-separated files or directories of them; the ``rlvr sweep FILE`` CLI uses it for
files elsewhere, ``rlvr services`` for the directory of submitted sweeps; an extra file
whose ``name`` clashes with one in dags/sweeps replaces it).

A DAG run uses the sweep as it was when the run started: ``start_sweep`` snapshots it
(``components/sweep_runs.py``) and every task takes its settings, and the grid it maps
over, from that snapshot; the trigger form's params (seeds, methods, rerun) apply to it.

Parse-time rules (the scheduler re-parses this file every few seconds): import only
airflow.sdk, pydantic and yaml. Each task imports ``components.lineage`` (mlflow)
inside its body, and the stage modules (torch) are imported by run_stage only when
the stage really runs. Every task is a thin call of ``run_stage``; its cache makes
a retry or a cleared task cheap, and only small dicts (URIs, run ids) go to XCom.

``executor: kubernetes`` (``_gpu_pods``): the GPU stages filter_hard, train and evaluate
are KubernetesPodOperator tasks running ``rlvr run-stage`` in the trainer image from the
pod template ``manifests/base/pod-templates/gpu-stage.yaml``, one pod per model / grid
cell / eval cell (``components/k8s/stage_pods.py`` builds the specs, the sweep's
``kubernetes:`` block sizes them). Every other task (start/end of the sweep run,
prepare_data, pretrain = download or registration of a hub model, seed_prefixes, tokens,
tables, and the small ``*_args`` tasks) stays a Python task: under Airflow's
KubernetesExecutor each task already gets its own worker pod in the pipeline image,
which mounts the same ``rlvr-artifacts`` volume at RLVR_HOME=/rlvr. The provider is
imported only when such a sweep is built. Local mode builds exactly the tasks above.

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

from components.sweep import Sweep, SweepError, load_sweep, slug, sweep_digest

SWEEPS_DIR = Path(__file__).resolve().parent / "sweeps"
EXTRA_ENV = "RLVR_EXTRA_SWEEPS"
ONLY_ENV = "RLVR_ONLY_DAG"
POOL_ENV = "RLVR_STAGE_POOL"
SWEEP_ERRORS: dict[str, str] = {}   # sweep file -> one-line error
SWEEP_FILES: dict[str, str] = {}    # dag_id -> sweep file it came from
START = datetime(2025, 1, 1)


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


def _stage(name: str, params: dict, inputs: dict, sweep: str, parent: str | None, cell: dict | None = None) -> dict:
    from airflow.sdk.exceptions import AirflowFailException

    from components.lineage import StageError, run_stage
    from components.receipts import record
    # DAG run conf / trigger form {"rerun": true} (``rlvr sweep --rerun``) recomputes despite
    # the cache; only on the first try, so that a retry still reuses what finished.
    ctx = get_current_context()
    force = bool((ctx.get("params") or {}).get("rerun")) and ctx["ti"].try_number <= 1
    try:
        result = run_stage(name, params, inputs, sweep=sweep, parent_run_id=parent, force=force, cell=cell)
    except StageError as e:  # bad params / missing input: retrying cannot help
        raise AirflowFailException(str(e)) from None
    record(name, params, inputs, result)   # for `rlvr sweep`'s cached-rerun check
    return result


def _items(seq) -> list:
    # Mapped results arrive as a lazy XCom sequence; one slice is one request, where
    # iterating probes past the end and logs a spurious "XCom not found" error.
    return list(seq[:])


def _stage_slots() -> dict:
    """Pool of the compute stages when the deployment defines one (``rlvr services`` sets
    RLVR_STAGE_POOL to a pool of <cores> slots and RLVR_STAGE_POOL_SLOTS to the threads a
    stage uses): parallel stage tasks never oversubscribe the cores, while the small
    bookkeeping tasks run beside them. Elsewhere (dag.test, Kubernetes) the default pool."""
    pool = os.environ.get(POOL_ENV)
    return {"pool": pool, "pool_slots": int(os.environ.get(POOL_ENV + "_SLOTS") or 1)} if pool else {}


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
    heavy = _stage_slots()

    @dag(dag_id=dag_id_for(name), schedule=None, start_date=START, catchup=False,
         description=(cfg.description or f"RLVR sweep {name}")[:200],
         doc_md=f"Sweep file: `{source}` (sweep digest `{sweep_digest(cfg)}`)\n\nGrid: {len(cfg.grid())} "
                f"training runs ({', '.join(g['key'] for g in cfg.grid())}).\n\nEach run uses the sweep as "
                "it was when the run started (snapshot in `start_sweep` and the MLflow sweep run).",
         tags=["rlvr", cfg.executor], params=_params(cfg),
         default_args={"retries": cfg.retries, "retry_delay": timedelta(seconds=cfg.retry_delay_s)})
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
        def grid(sweep: dict) -> list[dict]:
            """The training cells of this run's sweep (train's map): model x method x seed."""
            return _cfg(sweep).grid()

        @task(**heavy)
        def prepare_data(parent: str, sweep: dict) -> dict:
            return _stage("prepare_data", _cfg(sweep).stages.prepare_data, {}, name, parent)

        # One task per stage even with several models: it loops, and the cache keeps
        # a retry from recomputing the models that already finished.
        @task(**heavy)
        def pretrain(parent: str, sweep: dict, data: dict) -> dict:
            c = _cfg(sweep)
            return {m: _stage("pretrain", c.pretrain_params(m), {"data": data["uri"]}, name, parent, {"model": m})
                    for m in c.pretrained_models()}

        @task(**heavy)
        def filter_hard(parent: str, sweep: dict, data: dict, models: dict) -> dict:
            c = _cfg(sweep)
            return {m: _stage("filter_hard", c.stages.filter_hard, {"data": data["uri"], "model": models[m]["uri"]},
                              name, parent, {"model": m}) for m in c.models}

        @task(**heavy)
        def seed_prefixes(parent: str, sweep: dict, hard: dict) -> dict:
            c = _cfg(sweep)
            return {m: _stage("seed_prefixes", c.stages.seed_prefixes, {"hard": hard[m]["uri"]}, name, parent,
                              {"model": m})
                    for m in c.models}

        @task(map_index_template="{{ rlvr_key }}", **heavy)
        def train(cell: dict, parent: str, sweep: dict, models: dict, hard: dict, prefixes: dict) -> dict:
            get_current_context()["rlvr_key"] = cell["key"]  # readable map index in the UI
            m = cell["model"]
            res = _stage("train", _cfg(sweep).train_params(cell["method"], cell["seed"]),
                         {"model": models[m]["uri"], "hard": hard[m]["uri"], "prefixes": prefixes[m]["uri"],
                          **({"teacher": models[t]["uri"]} if (t := _cfg(sweep).teacher_of(cell["method"])) else {})},
                         name, parent, cell)
            return {**res, **cell}

        @task
        def eval_plan(sweep: dict, trains: list, models: dict) -> list[dict]:
            """Aggregator: (every trained model + each base model and used teacher) x (the held-out split
            when ``heldout_eval`` + each of ``benchmarks``), as evaluate's map."""
            c = _cfg(sweep)
            uris = {t["key"]: t["uri"] for t in _items(trains)}
            uris.update({k: models[m]["uri"] for k, m in c.untrained_eval_models().items()})
            return [{"label": e["label"], "model": e["model"], "benchmark": e["benchmark"], "uri": uris[e["key"]]}
                    for e in c.eval_cells() if e["key"] in uris]

        @task(map_index_template="{{ rlvr_key }}", **heavy)
        def evaluate(spec: dict, parent: str, sweep: dict, hard: dict) -> dict:
            get_current_context()["rlvr_key"] = spec["label"]
            res = _stage("evaluate", _cfg(sweep).evaluate_params(spec["label"], spec.get("benchmark")),
                         {"model": spec["uri"], "hard": hard[spec["model"]]["uri"]}, name, parent, spec)
            return {**res, "label": spec["label"]}

        @task(**heavy)
        def tokens(parent: str, sweep: dict, trains: list) -> dict:
            return _stage("tokens", _cfg(sweep).stages.tokens, {f"run_{t['key']}": t["uri"] for t in _items(trains)},
                          name, parent)

        @task(**heavy)
        def tables(parent: str, sweep: dict, evals: list, trains: list, tok: dict) -> dict:
            # train outputs too: their metric histories are the training-curve plots
            inputs = {f"eval_{e['label']}": e["uri"] for e in _items(evals)}
            inputs.update({f"run_{t['key']}": t["uri"] for t in _items(trains)})
            return _stage("tables", _cfg(sweep).stages.tables, {**inputs, "tokens": tok["uri"]}, name, parent)

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
        data = prepare_data(parent, snap)
        models = pretrain(parent, snap, data)
        if cfg.executor == "kubernetes":
            trains, evals = _gpu_pods(cfg, parent, snap, data, models)
        else:
            hard = filter_hard(parent, snap, data, models)
            prefixes = seed_prefixes(parent, snap, hard)
            trains = train.partial(parent=parent, sweep=snap, models=models, hard=hard, prefixes=prefixes).expand(
                cell=grid(snap))
            evals = evaluate.partial(parent=parent, sweep=snap, hard=hard).expand(spec=eval_plan(snap, trains, models))
        tabs = tables(parent, snap, evals, trains, tokens(parent, snap, trains))
        end = end_sweep()
        start >> end
        tabs >> end
        end.as_teardown()

    return sweep_dag()


def _gpu_pods(cfg: Sweep, parent, snap, data, models):
    """Kubernetes mode: filter_hard, train and evaluate as KubernetesPodOperator tasks, one
    pod per model / grid cell / eval cell (dynamic task mapping). Their argument lists need
    the upstream artifact URIs, so small ``*_args`` tasks build them at run time from the
    run's sweep snapshot; each pod's result comes back through the XCom sidecar, labelled
    with its cell (``--extra``). The pods' settings (image, resources) are the parse-time
    sweep's: they shape the operators."""
    from airflow.sdk.exceptions import AirflowFailException

    from components.k8s import stage_pods  # the provider and the kubernetes client: kubernetes sweeps only

    name, ks = cfg.name, cfg.kubernetes
    pod_op = stage_pods.operator_class()

    def pod(stage: str, params: dict, inputs: dict, parent: str, cell: str, extra: dict) -> dict:
        return stage_pods.pod_kwargs(ks, stage, params, inputs, sweep=name, parent=parent, cell=cell, extra=extra)

    def by_model(results) -> dict:
        return {r["model"]: r for r in _items(results)}

    @task
    def filter_hard_args(parent: str, sweep: dict, data: dict, models: dict) -> list[dict]:
        try:  # fail here, in a CPU worker, not as an empty pod on a GPU node
            stage_pods.check_template(ks)
        except stage_pods.PodSpecError as e:
            raise AirflowFailException(f"{name}: {e}") from None
        c = _cfg(sweep)
        return [pod("filter_hard", c.stages.filter_hard, {"data": data["uri"], "model": models[m]["uri"]},
                    parent, slug(m), {"model": m}) for m in c.models]

    @task(task_id="seed_prefixes")
    def seed_prefixes_cpu(parent: str, sweep: dict, hard: list) -> dict:
        c = _cfg(sweep)
        return {m: _stage("seed_prefixes", c.stages.seed_prefixes, {"hard": h["uri"]}, name, parent)
                for m, h in by_model(hard).items()}

    @task
    def train_args(parent: str, sweep: dict, models: dict, hard: list, prefixes: dict) -> list[dict]:
        c, hard = _cfg(sweep), by_model(hard)
        return [pod("train", c.train_params(g["method"], g["seed"]),
                    {"model": models[g["model"]]["uri"], "hard": hard[g["model"]]["uri"],
                     "prefixes": prefixes[g["model"]]["uri"],
                     **({"teacher": models[t]["uri"]} if (t := c.teacher_of(g["method"])) else {})},
                    parent, g["key"], g) for g in c.grid()]

    @task(task_id="eval_plan")
    def eval_args(parent: str, sweep: dict, trains: list, models: dict, hard: list) -> list[dict]:
        """As local mode's eval_plan, one pod per (trained or base model) x eval target."""
        c = _cfg(sweep)
        uris = {t["key"]: t["uri"] for t in _items(trains)}
        uris.update({k: models[m]["uri"] for k, m in c.untrained_eval_models().items()})
        hard = by_model(hard)
        return [pod("evaluate", c.evaluate_params(e["label"], e["benchmark"]),
                    {"model": uris[e["key"]], "hard": hard[e["model"]]["uri"]}, parent, e["label"],
                    {"label": e["label"]}) for e in c.eval_cells() if e["key"] in uris]

    hard = pod_op.partial(**stage_pods.partial_kwargs(ks, "filter_hard")).expand_kwargs(
        filter_hard_args(parent, snap, data, models)).output  # the XComArg of all mapped results
    prefixes = seed_prefixes_cpu(parent, snap, hard)
    trains = pod_op.partial(**stage_pods.partial_kwargs(ks, "train")).expand_kwargs(
        train_args(parent, snap, models, hard, prefixes)).output
    evals = pod_op.partial(**stage_pods.partial_kwargs(ks, "evaluate")).expand_kwargs(
        eval_args(parent, snap, trains, models, hard)).output
    return trains, evals


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
