"""Airflow DAG factory: one DAG ``rlvr_<name>`` per sweep file.

Sweep files: ``dags/sweeps/*.yaml`` plus those listed in ``RLVR_EXTRA_SWEEPS``
(os.pathsep-separated; the ``rlvr sweep FILE`` CLI uses it for files elsewhere; an
extra file whose ``name`` clashes with one in dags/sweeps replaces it).

Parse-time rules (the scheduler re-parses this file every few seconds): import only
airflow.sdk, pydantic and yaml. Each task imports ``components.lineage`` (mlflow)
inside its body, and the stage modules (torch) are imported by run_stage only when
the stage really runs. Every task is a thin call of ``run_stage``; its cache makes
a retry or a cleared task cheap, and only small dicts (URIs, run ids) go to XCom.

``executor: kubernetes`` (``_gpu_pods``): the GPU stages filter_hard, train and evaluate
are KubernetesPodOperator tasks running ``rlvr run-stage`` in the trainer image from the
pod template ``manifests/base/pod-templates/gpu-stage.yaml``, one pod per model / grid
cell / eval cell (``components/k8s/pods.py`` builds the specs, the sweep's
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

from components.sweep import Sweep, SweepError, load_sweep, slug

SWEEPS_DIR = Path(__file__).resolve().parent / "sweeps"
EXTRA_ENV = "RLVR_EXTRA_SWEEPS"
ONLY_ENV = "RLVR_ONLY_DAG"
SWEEP_ERRORS: dict[str, str] = {}   # sweep file -> one-line error
SWEEP_FILES: dict[str, str] = {}    # dag_id -> sweep file it came from
START = datetime(2025, 1, 1)


def sweep_files() -> list[Path]:
    files = sorted(SWEEPS_DIR.glob("*.yaml")) + sorted(SWEEPS_DIR.glob("*.yml"))
    extra = [Path(p).expanduser().resolve() for p in os.environ.get(EXTRA_ENV, "").split(os.pathsep) if p]
    return files + [p for p in extra if p not in files]


def dag_id_for(name: str) -> str:
    return f"rlvr_{name}"


def _stage(name: str, params: dict, inputs: dict, sweep: str, parent: str | None) -> dict:
    from airflow.sdk.exceptions import AirflowFailException

    from components.lineage import StageError, run_stage
    # DAG run conf {"rerun": true} (``rlvr sweep --rerun``) recomputes despite the
    # cache; only on the first try, so that a retry still reuses what finished.
    ctx = get_current_context()
    conf = getattr(ctx.get("dag_run"), "conf", None) or {}
    force = bool(conf.get("rerun")) and ctx["ti"].try_number <= 1
    try:
        return run_stage(name, params, inputs, sweep=sweep, parent_run_id=parent, force=force)
    except StageError as e:  # bad params / missing input: retrying cannot help
        raise AirflowFailException(str(e)) from None


def _items(seq) -> list:
    # Mapped results arrive as a lazy XCom sequence; one slice is one request, where
    # iterating probes past the end and logs a spurious "XCom not found" error.
    return list(seq[:])


def build_dag(cfg: Sweep, source: Path):
    name = cfg.name
    st = cfg.stages
    raw = cfg.model_dump(mode="json")

    @dag(dag_id=dag_id_for(name), schedule=None, start_date=START, catchup=False,
         description=(cfg.description or f"RLVR sweep {name}")[:200],
         doc_md=f"Sweep file: `{source}`\n\nGrid: {len(cfg.grid())} training runs "
                f"({', '.join(g['key'] for g in cfg.grid())}).",
         tags=["rlvr", cfg.executor],
         default_args={"retries": cfg.retries, "retry_delay": timedelta(seconds=cfg.retry_delay_s)})
    def sweep_dag():
        @task
        def start_sweep() -> str:
            from components.lineage import start_sweep_run
            return start_sweep_run(name, raw)

        @task
        def prepare_data(parent: str) -> dict:
            return _stage("prepare_data", st.prepare_data, {}, name, parent)

        # One task per stage even with several models: it loops, and the cache keeps
        # a retry from recomputing the models that already finished.
        @task
        def pretrain(parent: str, data: dict) -> dict:
            return {m: _stage("pretrain", cfg.pretrain_params(m), {"data": data["uri"]}, name, parent)
                    for m in cfg.models}

        @task
        def filter_hard(parent: str, data: dict, models: dict) -> dict:
            return {m: _stage("filter_hard", st.filter_hard, {"data": data["uri"], "model": models[m]["uri"]},
                              name, parent) for m in cfg.models}

        @task
        def seed_prefixes(parent: str, hard: dict) -> dict:
            return {m: _stage("seed_prefixes", st.seed_prefixes, {"hard": hard[m]["uri"]}, name, parent)
                    for m in cfg.models}

        @task(map_index_template="{{ rlvr_key }}")
        def train(cell: dict, parent: str, models: dict, hard: dict, prefixes: dict) -> dict:
            get_current_context()["rlvr_key"] = cell["key"]  # readable map index in the UI
            m = cell["model"]
            res = _stage("train", cfg.train_params(cell["method"], cell["seed"]),
                         {"model": models[m]["uri"], "hard": hard[m]["uri"], "prefixes": prefixes[m]["uri"]},
                         name, parent)
            return {**res, **cell}

        @task
        def eval_plan(trains: list, models: dict) -> list[dict]:
            """Aggregator: (every trained model + each base model) x (the held-out split
            when ``heldout_eval`` + each of ``benchmarks``), as evaluate's map."""
            uris = {t["key"]: t["uri"] for t in _items(trains)}
            uris.update({f"{slug(m)}-base": models[m]["uri"] for m in cfg.models})
            return [{"label": c["label"], "model": c["model"], "benchmark": c["benchmark"], "uri": uris[c["key"]]}
                    for c in cfg.eval_cells() if c["key"] in uris]

        @task(map_index_template="{{ rlvr_key }}")
        def evaluate(spec: dict, parent: str, hard: dict) -> dict:
            get_current_context()["rlvr_key"] = spec["label"]
            res = _stage("evaluate", cfg.evaluate_params(spec["label"], spec.get("benchmark")),
                         {"model": spec["uri"], "hard": hard[spec["model"]]["uri"]}, name, parent)
            return {**res, "label": spec["label"]}

        @task
        def tokens(parent: str, trains: list) -> dict:
            return _stage("tokens", st.tokens, {f"run_{t['key']}": t["uri"] for t in _items(trains)}, name, parent)

        @task
        def tables(parent: str, evals: list, trains: list, tok: dict) -> dict:
            # train outputs too: their metric histories are the training-curve plots
            inputs = {f"eval_{e['label']}": e["uri"] for e in _items(evals)}
            inputs.update({f"run_{t['key']}": t["uri"] for t in _items(trains)})
            return _stage("tables", st.tables, {**inputs, "tokens": tok["uri"]}, name, parent)

        @task
        def end_sweep(parent: str) -> str:
            # A teardown: runs even after failures (so the parent run is closed) and
            # does not decide the DAG run's state; 'tables' having no result = failed.
            from components.lineage import end_sweep_run
            done = get_current_context()["ti"].xcom_pull(task_ids="tables")
            status = "FINISHED" if done else "FAILED"
            end_sweep_run(parent, status)
            return status

        parent = start_sweep()
        data = prepare_data(parent)
        models = pretrain(parent, data)
        if cfg.executor == "kubernetes":
            trains, evals = _gpu_pods(cfg, parent, data, models)
        else:
            hard = filter_hard(parent, data, models)
            prefixes = seed_prefixes(parent, hard)
            trains = train.partial(parent=parent, models=models, hard=hard, prefixes=prefixes).expand(cell=cfg.grid())
            evals = evaluate.partial(parent=parent, hard=hard).expand(spec=eval_plan(trains, models))
        tabs = tables(parent, evals, trains, tokens(parent, trains))
        end = end_sweep(parent)
        tabs >> end
        end.as_teardown(setups=parent)

    return sweep_dag()


def _gpu_pods(cfg: Sweep, parent, data, models):
    """Kubernetes mode: filter_hard, train and evaluate as KubernetesPodOperator tasks, one
    pod per model / grid cell / eval cell (dynamic task mapping). Their argument lists need
    the upstream artifact URIs, so small ``*_args`` tasks build them at run time; each
    pod's result comes back through the XCom sidecar, labelled with its cell (``--extra``)."""
    from airflow.sdk.exceptions import AirflowFailException

    from components.k8s import pods  # the provider and the kubernetes client: kubernetes sweeps only

    name, st, ks = cfg.name, cfg.stages, cfg.kubernetes
    pod_op = pods.operator_class()

    def pod(stage: str, params: dict, inputs: dict, parent: str, cell: str, extra: dict) -> dict:
        return pods.pod_kwargs(ks, stage, params, inputs, sweep=name, parent=parent, cell=cell, extra=extra)

    def by_model(results) -> dict:
        return {r["model"]: r for r in _items(results)}

    @task
    def filter_hard_args(parent: str, data: dict, models: dict) -> list[dict]:
        try:  # fail here, in a CPU worker, not as an empty pod on a GPU node
            pods.check_template(ks)
        except pods.PodSpecError as e:
            raise AirflowFailException(f"{name}: {e}") from None
        return [pod("filter_hard", st.filter_hard, {"data": data["uri"], "model": models[m]["uri"]},
                    parent, slug(m), {"model": m}) for m in cfg.models]

    @task(task_id="seed_prefixes")
    def seed_prefixes_cpu(parent: str, hard: list) -> dict:
        return {m: _stage("seed_prefixes", st.seed_prefixes, {"hard": h["uri"]}, name, parent)
                for m, h in by_model(hard).items()}

    @task
    def train_args(parent: str, models: dict, hard: list, prefixes: dict) -> list[dict]:
        hard = by_model(hard)
        return [pod("train", cfg.train_params(c["method"], c["seed"]),
                    {"model": models[c["model"]]["uri"], "hard": hard[c["model"]]["uri"],
                     "prefixes": prefixes[c["model"]]["uri"]}, parent, c["key"], c) for c in cfg.grid()]

    @task(task_id="eval_plan")
    def eval_args(parent: str, trains: list, models: dict, hard: list) -> list[dict]:
        """As local mode's eval_plan, one pod per (trained or base model) x eval target."""
        uris = {t["key"]: t["uri"] for t in _items(trains)}
        uris.update({f"{slug(m)}-base": models[m]["uri"] for m in cfg.models})
        hard = by_model(hard)
        return [pod("evaluate", cfg.evaluate_params(c["label"], c["benchmark"]),
                    {"model": uris[c["key"]], "hard": hard[c["model"]]["uri"]}, parent, c["label"],
                    {"label": c["label"]}) for c in cfg.eval_cells() if c["key"] in uris]

    hard = pod_op.partial(**pods.partial_kwargs(ks, "filter_hard")).expand_kwargs(
        filter_hard_args(parent, data, models)).output  # the XComArg of all mapped results
    prefixes = seed_prefixes_cpu(parent, hard)
    trains = pod_op.partial(**pods.partial_kwargs(ks, "train")).expand_kwargs(
        train_args(parent, models, hard, prefixes)).output
    evals = pod_op.partial(**pods.partial_kwargs(ks, "evaluate")).expand_kwargs(
        eval_args(parent, trains, models, hard)).output
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
