"""The ``rlvr`` command.

- ``rlvr sweep FILE [--rerun]``  run a whole sweep DAG in-process (Airflow ``dag.test()``
  on a project-local SQLite metadata DB; no scheduler, no webserver);
- ``rlvr run-stage NAME --params JSON --inputs JSON``  one cached stage (what an
  Airflow task or a Kubernetes pod runs), and ``rlvr train-verl ...``  one verl run outside
  the cache (a KubeRay RayJob): the job commands, in ``components/job_cli.py``;
- ``rlvr rerun SWEEP STAGE [--cell LABEL] [--run ID] [--on-services]``  recompute one stage
  (one cell) and its downstream, in process or in an Airflow run of the services;
- ``rlvr ui``  the MLflow UI on this project's store;
- ``rlvr compile SWEEP --target kfp -o FILE.yaml``  the Kubeflow Pipelines v2 pipeline of a sweep;
- ``rlvr tables SWEEP``  print the latest tables of a sweep;
- ``rlvr tracking replay [SPOOL]``  send what stages spooled while the tracking server was down;
- ``rlvr services up|down|status``  a local Airflow + MLflow server + PostgreSQL deployment
  (``components/services``); ``rlvr sweep FILE --on-services`` runs a sweep on it.

Heavy modules (airflow, mlflow) are imported inside the commands: airflow reads its
configuration from the environment at import time, so the environment is set first.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from components import lineage, receipts, stage_graph
from components.job_cli import _die, run_stage_cmd, train_verl_cmd
from components.sweep import SweepError, load_sweep

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "dags"
app = typer.Typer(add_completion=False, no_args_is_help=True, help="RLVR sweeps: cached stages tracked in MLflow.")


@app.callback()
def _progress_to_console() -> None:
    # stage progress lines go to this terminal, not through Airflow's log handlers
    from components import progress
    progress.to_console()


def airflow_env() -> dict[str, str]:
    """The embedded Airflow: its own home and SQLite DB under $RLVR_HOME, never the
    user's AIRFLOW_HOME (dag.test() writes to the metadata DB it finds). SQLite takes one
    writer, so two sweeps running at once on one store (sharing its stage cache) each name
    their own $RLVR_AIRFLOW_HOME."""
    home = lineage.rlvr_home()
    af = Path(os.environ["RLVR_AIRFLOW_HOME"]).resolve() if os.environ.get("RLVR_AIRFLOW_HOME") else home / "airflow"
    return {
        "RLVR_HOME": str(home),  # pinned so that airflow subprocesses agree on the store
        "AIRFLOW_HOME": str(af),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{af / 'airflow.db'}",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": os.environ.get("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING"),
    }


def _checked_sweep(file: Path):
    """The sweep of ``file`` with every stage's params validated (this imports the stage
    modules); a bad one exits with one line naming the file and field."""
    try:
        cfg = load_sweep(file)
        for stage, params in stage_graph.planned_params(cfg):
            lineage.check_params(stage, params)
    except SweepError as e:
        _die(str(e))
    except lineage.StageError as e:
        where = f"stages.{stage}" + ("" if e.field == "<root>" else f".{e.field}")
        if stage == "train" and e.field.startswith("method_config."):  # it came from method_config.<m>
            where = f"method_config.{params['method']}.{e.field.split('.', 1)[1]}"
        _die(f"{file}: {where}: {e.problem}" if e.field else f"{file}: {e}")
    return cfg


def _sweep_file(ref: str) -> Path | None:
    """The sweep YAML ``ref`` names: a path, or a name in dags/sweeps; None when neither."""
    if ref.endswith((".yaml", ".yml")):
        if not Path(ref).exists():
            _die(f"{ref}: no such file")
        return Path(ref).expanduser().resolve()
    f = DAGS / "sweeps" / f"{ref}.yaml"
    return f if f.exists() else None


def _sweep_name(ref: str) -> str:
    """The sweep name ``ref`` gives: the ``name`` of the sweep YAML it names, else ``ref`` itself."""
    file = _sweep_file(ref)
    try:
        return load_sweep(file).name if file else ref
    except SweepError as e:
        _die(str(e))


def ensure_airflow_db(env: dict[str, str]) -> None:
    from components.services.deploy import migrate_airflow_db
    from components.services.postgres import ServiceError
    try:
        migrate_airflow_db(Path(env["AIRFLOW_HOME"]), {**os.environ, **env},
                           lambda msg: typer.echo(f"[rlvr] {msg}", err=True))
    except ServiceError as e:
        _die(str(e), 1)


@app.command()
def sweep(file: Path = typer.Argument(..., help="sweep YAML"),
          rerun: bool = typer.Option(False, "--rerun", help="recompute every stage, ignoring the cache"),
          dag: bool = typer.Option(False, "--dag", help="run the DAG even when every stage is known to be cached"),
          on_services: bool = typer.Option(False, "--on-services",
                                           help="trigger it on the Airflow of `rlvr services up` and follow it")
          ) -> None:
    """Run a sweep end to end in this process (Airflow dag.test on SQLite). When the last
    successful run's stage calls are all still cached (components/receipts.py), Airflow is
    not started at all."""
    file = file.expanduser().resolve()
    cfg = _checked_sweep(file)  # fail fast, before airflow's slow start
    if on_services:
        from components.services.cli import sweep_on_services
        raise typer.Exit(sweep_on_services(file, cfg, rerun, _print_tables))
    home, dag_id = lineage.rlvr_home(), f"rlvr_{cfg.name}"
    fp = receipts.fingerprint(cfg.model_dump(mode="json"))
    if not (rerun or dag):
        t0 = time.monotonic()
        hit, why, n = receipts.all_cached(home, cfg.name, fp)
        if hit:
            typer.echo(f"[rlvr] {dag_id}: all {n} stage calls of its last successful run are cached and verified "
                       f"({time.monotonic() - t0:.1f}s); Airflow not started (--dag runs the DAG anyway)", err=True)
            _footer()
            _print_tables(cfg.name, plots=True)
            return
        typer.echo(f"[rlvr] running the DAG: {why}", err=True)
    env = airflow_env()
    env["RLVR_ONLY_DAG"] = dag_id   # the DAG file builds this sweep's DAG only
    if file.parent != (DAGS / "sweeps").resolve():
        extra = [p for p in os.environ.get("RLVR_EXTRA_SWEEPS", "").split(os.pathsep) if p]
        env["RLVR_EXTRA_SWEEPS"] = os.pathsep.join(extra + [str(file)])
    os.environ.update(env)
    ensure_airflow_db(env)

    from airflow.dag_processing.dagbag import DagBag  # only now: airflow reads env at import
    bag = DagBag(dag_folder=str(DAGS), safe_mode=False)
    if dag_id not in bag.dags:
        errs = "; ".join(f"{k}: {v.strip().splitlines()[-1]}" for k, v in bag.import_errors.items())
        _die(f"{file}: DAG {dag_id} was not built{(' (' + errs + ')') if errs else ''}", 1)
    typer.echo(f"[rlvr] running {dag_id}: {len(cfg.grid())} training runs, RLVR_HOME={env['RLVR_HOME']}", err=True)
    receipt = receipts.begin(home, cfg.name)
    os.environ[receipts.RECEIPT_ENV] = str(receipt)   # every run_stage call of this DAG run
    try:
        # the validated sweep as the run's snapshot: every task uses it, not the file
        dr = bag.dags[dag_id].test(run_conf={"rerun": rerun, "sweep": cfg.model_dump(mode="json")})
    finally:
        os.environ.pop(receipts.RECEIPT_ENV, None)
    state = str(getattr(dr.state, "value", dr.state))
    _report(dr, state)
    if state != "success":
        receipt.unlink(missing_ok=True)
        raise typer.Exit(1)
    receipts.commit(home, cfg.name, fp, receipt)
    _print_tables(cfg.name, plots=True)


@app.command()
def rerun(sweep_ref: str = typer.Argument(..., metavar="SWEEP", help="sweep name or sweep YAML"),
          stage: str = typer.Argument(..., help="the stage to recompute (train, evaluate, tables, ...)"),
          cell: Optional[str] = typer.Option(None, "--cell", help="one mapped cell by its label (tiny-vsr-s0; "
                                                                  "an evaluation's label) or map index"),
          run_id: Optional[str] = typer.Option(None, "--run", help="the Airflow run (default: the latest); "
                                                                   "services only"),
          on_services: bool = typer.Option(False, "--on-services", help="clear it in a run of `rlvr services up`'s "
                                                                        "Airflow and follow the run")) -> None:
    """Rerun a stage (one cell or all) and its downstream. --on-services: clear the tasks in the
    latest (or named) Airflow run over its REST API and follow it. In process: run the sweep
    again with that stage recomputed; its downstream reruns where its inputs changed, the rest
    is the cache."""
    file, name = _sweep_file(sweep_ref), _sweep_name(sweep_ref)
    if on_services or run_id:
        from components.services.cli import rerun_on_services
        raise typer.Exit(rerun_on_services(name, stage, cell, run_id, _print_tables))
    if file is None:
        _die(f"{sweep_ref}: no sweep file of that name in {DAGS / 'sweeps'}; give the sweep YAML")
    cfg = load_sweep(file)
    stages = {s for s, _ in stage_graph.planned_params(cfg)}   # an unknown stage fails before Airflow starts
    if stage not in stages:
        _die(f"{file}: no stage {stage!r} in this sweep (stages: {', '.join(sorted(stages))})")
    cells = {"train": [g["key"] for g in cfg.grid()], "evaluate": [e["label"] for e in cfg.eval_cells()]}.get(stage)
    if cell is not None and (cells is None or cell not in cells):
        _die(f"{file}: stage {stage!r} has no cell {cell!r}" + (f" (cells: {', '.join(cells)})" if cells else
                                                                " (it is not mapped)"))
    os.environ[lineage.FORCE_ENV] = stage + (f"@{cell}" if cell else "")
    sweep(file, rerun=False, dag=True, on_services=False)


def _report(dr, state: str) -> None:
    from rich.console import Console
    from rich.table import Table
    con = Console(stderr=True)
    t = Table(title=f"DAG run {dr.dag_id}: {state}")
    for col in ("task", "map", "state", "try"):
        t.add_column(col)
    try:
        for ti in sorted(dr.get_task_instances(), key=lambda x: (x.start_date is None, x.start_date, x.map_index)):
            t.add_row(ti.task_id, "" if ti.map_index < 0 else str(ti.rendered_map_index or ti.map_index),
                      str(getattr(ti.state, "value", ti.state)), str(ti.try_number))
        con.print(t)
    except Exception as e:  # noqa: BLE001 - the report is a courtesy; the state is what matters
        con.print(f"(task list unavailable: {e})")
    _footer(con)


def _footer(con=None) -> None:
    from rich.console import Console
    con = con or Console(stderr=True)
    home = lineage.rlvr_home()
    con.print(f"MLflow store:   {lineage.tracking_uri()}\n"
              f"MLflow files:   {lineage.artifact_root()}\n"
              f"Artifacts:      {home / 'artifacts'}\n"
              f"Browse runs:    RLVR_HOME={home} rlvr ui   (http://127.0.0.1:5000)",
              soft_wrap=True)   # paths and the command stay whole lines: copied, they must work


# the commands a pod or a RayJob runs (components/job_cli.py)
app.command("run-stage")(run_stage_cmd)
app.command("train-verl")(train_verl_cmd)


KFP_PYTHON_ENV = "RLVR_KFP_PYTHON"   # the kfp venv's python; default .venv-kfp/bin/python


@app.command("compile")
def compile_cmd(file: Path = typer.Argument(..., help="sweep YAML"),
                target: str = typer.Option("kfp", "--target", help="kfp: a Kubeflow Pipelines v2 pipeline (IR YAML)"),
                output: Path = typer.Option(..., "-o", "--output", help="the pipeline file to write (.yaml)")) -> None:
    """Compile a sweep's stage graph for another orchestrator. --target kfp: the KFP v2 pipeline
    (components/kfp), compiled in the kfp environment (make kfp-env): kfp cannot share this one."""
    if target != "kfp":
        _die(f"--target: unknown target {target!r} (targets: kfp)")
    _checked_sweep(file)  # a bad sweep or stage param is reported here, not by a pod on the cluster
    py = Path(os.environ.get(KFP_PYTHON_ENV) or REPO / ".venv-kfp" / "bin" / "python")
    if not py.exists():
        _die(f"{py}: the kfp environment is missing; run `make kfp-env`", 1)
    r = subprocess.run([str(py), "-m", "components.kfp", "compile", str(file.expanduser().resolve()),
                        "-o", str(output.expanduser().resolve())], cwd=REPO)
    raise typer.Exit(r.returncode)


@app.command()
def ui(sweep_ref: Optional[str] = typer.Argument(None, metavar="[SWEEP]",
                                                help="sweep name or YAML (default: the latest sweep run's)"),
       port: int = typer.Option(5000, "--port")) -> None:
    """Print the direct URL to a sweep's runs. The MLflow server of `rlvr services up` (or an
    http MLFLOW_TRACKING_URI) serves it when running; otherwise the MLflow UI is started on
    this project's store (replacing this process)."""
    from components import tracking
    server = _use_running_mlflow_server()
    name = sweep_ref and _sweep_name(sweep_ref)
    base = server or f"http://127.0.0.1:{port}"
    try:
        url = tracking.sweep_runs_url(base, name)
    except LookupError as e:
        if name is not None:
            _die(str(e), 1)
        # an empty store is still worth browsing (experiments appear as sweeps run)
        typer.echo(f"{e}; opening the experiments list", err=True)
        url = f"{base}/#/experiments"
    typer.echo(url)
    if server:
        return
    exe = Path(sys.executable).with_name("mlflow")
    argv = [str(exe) if exe.exists() else "mlflow", "ui", "--backend-store-uri", lineage.tracking_uri(),
            "--default-artifact-root", lineage.artifact_root().as_uri(), "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1"]
    typer.echo(" ".join(argv), err=True)
    # one person browsing: one worker, and no GenAI job runner (its consumers cost ~700 MB)
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    os.execvp(argv[0], argv)


def _use_running_mlflow_server() -> str | None:
    """An http tracking URI the environment names, else the MLflow server of `rlvr services`
    when it answers (then set as MLFLOW_TRACKING_URI); None: no server, the store is local."""
    import httpx
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    try:
        from components.services import config as services_config
    except ImportError:
        return None
    cfg = services_config.load_config(services_config.services_dir())
    if cfg is None:
        return None
    url = services_config.mlflow_url(cfg)
    try:
        if httpx.get(url + "/health", timeout=3).status_code != 200:
            return None
    except httpx.HTTPError:
        return None
    os.environ["MLFLOW_TRACKING_URI"] = url
    return url


@app.command()
def tables(sweep_ref: str = typer.Argument(..., metavar="SWEEP", help="sweep name or sweep YAML")) -> None:
    """Print tables.md of the latest FINISHED 'tables' stage run of a sweep."""
    name = _sweep_name(sweep_ref)
    if "'" in name or "\\" in name:
        _die(f"not a sweep name: {name!r}")
    _print_tables(name)


def _print_tables(name: str, plots: bool = False) -> None:
    """tables.md of the sweep's latest FINISHED 'tables' stage run (and where its plots are)."""
    from components import tracking
    c = lineage.client()
    try:
        run = tracking.latest_tables_run(name)
    except LookupError as e:
        _die(str(e), 1)
    out = Path(run.data.tags.get("rlvr.output_uri", "/nonexistent"))
    text = _run_file(c, run.info.run_id, out / "tables.md")
    if text is None:
        _die(f"run {run.info.run_id} has no tables.md", 1)
    claims = _run_file(c, run.info.run_id, out / "claims.md")   # tables runs before claims existed have none
    if claims is not None and claims not in text:   # a pre-registered sweep's tables.md already ends with it
        text += "\n" + claims
    if plots and out.is_dir():
        text += "\n**Plots:** " + ", ".join(str(p) for p in sorted(out.glob("*.png"))) + "\n"
    if not sys.stdout.isatty():  # piped: the Markdown itself, unwrapped and diffable
        typer.echo(text)
        return
    from rich.console import Console
    from rich.markdown import Markdown
    Console().print(Markdown(text))


def _run_file(c, run_id: str, local: Path) -> str | None:
    """A file of a tables run: its local output, else its MLflow artifact; None when it has neither."""
    try:
        return local.read_text() if local.is_file() else Path(c.download_artifacts(run_id, local.name)).read_text()
    except Exception:  # noqa: BLE001 - no such artifact
        return None


tracking_app = typer.Typer(add_completion=False, no_args_is_help=True,
                           help="Records spooled by stages while the tracking server did not answer.")


@tracking_app.command("replay")
def tracking_replay(spool: Optional[list[Path]] = typer.Argument(
        None, help="spool files (<run id>.jsonl); default: every spool under $RLVR_HOME/work")) -> None:
    """Send spooled metrics, params, tags, outputs and run ends to their MLflow runs, in order."""
    from components import tracking_spool
    _use_running_mlflow_server()
    files = spool or tracking_spool.spools(lineage.rlvr_home())
    if not files:
        typer.echo(f"no spooled records under {lineage.rlvr_home() / 'work'}", err=True)
        return
    for f in files:
        if not f.is_file() or f.suffix != ".jsonl":
            _die(f"{f}: not a spool file (<run id>.jsonl)")
        try:
            n = tracking_spool.replay_file(f, lineage.tracking_uri())
        except (tracking_spool.TrackingUnavailable, ValueError) as e:
            _die(str(e), 1)
        typer.echo(f"{f}: {n} record(s) sent to run {f.stem} at {lineage.tracking_uri()}")


from components.services.cli import app as services_app  # noqa: E402 - light: typer + httpx

app.add_typer(services_app, name="services")
app.add_typer(tracking_app, name="tracking")

if __name__ == "__main__":
    app()
