"""``rlvr services up|restart|down|status`` and the ``--on-services`` path of ``rlvr sweep``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

import typer

from components.services import config, deploy, remote
from components.services.postgres import ServiceError
from components.sweep import Sweep, sweep_digest

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="A local Airflow + MLflow + PostgreSQL deployment under $RLVR_HOME/services.")


def _die(msg: str, code: int = 1) -> None:
    typer.echo(" ".join(str(msg).split()), err=True)
    raise typer.Exit(code)


def _log(msg: str) -> None:
    typer.echo(f"[services] {msg}", err=True)


@app.command()
def up(db: Optional[str] = typer.Option(None, "--db", help="postgres (default when installed) | sqlite"),
       airflow_port: Optional[int] = typer.Option(None, "--airflow-port", help="Airflow api-server / UI (8080)"),
       mlflow_port: Optional[int] = typer.Option(None, "--mlflow-port", help="MLflow tracking server (5000)"),
       pg_port: Optional[int] = typer.Option(None, "--pg-port", help="PostgreSQL on 127.0.0.1 (5433)"),
       parallelism: Optional[int] = typer.Option(None, "--parallelism", help="stage threads at once: the stage pool's slots (default: cores)"),
       timeout: float = typer.Option(240.0, "--timeout", help="seconds to wait for every service to be healthy"),
       ) -> None:
    """Start PostgreSQL, the MLflow server and Airflow (api-server, scheduler, dag-processor,
    triggerer), those that are not running (a running one and its tasks are left alone);
    wait until all are healthy."""
    if db not in (None, "postgres", "sqlite"):
        _die(f"--db: {db!r} is not one of postgres, sqlite", 2)
    try:
        cfg = deploy.up(db=db, ports={"airflow_port": airflow_port, "mlflow_port": mlflow_port, "pg_port": pg_port},
                        parallelism=parallelism, timeout=timeout, log=_log)
    except ServiceError as e:
        _die(e)
    sd = config.services_dir()
    typer.echo(f"Airflow:  {config.airflow_url(cfg)}  (all users are admins; REST: /api/v2, token: GET /auth/token)\n"
               f"MLflow:   {config.mlflow_url(cfg)}\n"
               f"Database: {cfg['db']}" + (f" on 127.0.0.1:{cfg['pg_port']} ({cfg.get('pg_data')})"
                                            if cfg["db"] == "postgres" else "") + "\n"
               f"Executor: LocalExecutor, {config.stage_slots(cfg)} stage slots + {config.BOOKKEEPING_SLOTS} for "
               "bookkeeping tasks\n"
               f"Files:    {sd}  (logs/, pids.json; `source {sd / 'env.sh'}` for the airflow CLI)\n"
               f"Run:      rlvr sweep FILE --on-services")


@app.command()
def restart(names: Optional[list[str]] = typer.Argument(None, metavar="[SERVICE]...",
                                                        help="postgres, mlflow, api-server, scheduler, dag-processor, "
                                                             "triggerer (default: all)"),
            force: bool = typer.Option(False, "--force", help="restart the scheduler even while it runs tasks"),
            timeout: float = typer.Option(240.0, "--timeout", help="seconds to wait for every service to be healthy"),
            ) -> None:
    """Stop the named services and start them again; the others keep running."""
    try:
        done = deploy.restart(names or [], force=force, timeout=timeout, log=_log)
    except ServiceError as e:
        _die(e)
    _log(f"restarted {', '.join(done)}; all services healthy")


@app.command()
def down(purge: bool = typer.Option(False, "--purge", help="also delete the deployment's databases, logs and config")
         ) -> None:
    """Stop exactly the processes `up` started (by their recorded sessions)."""
    said = deploy.down(log=_log, purge=purge)
    if not said:
        _log("nothing was running")


@app.command()
def status() -> None:
    """Each service: pid, running, health (HTTP / database checks). Exit 1 unless all are ok."""
    rows = deploy.status()
    if not rows:
        _die(f"no deployment under {config.services_dir()} (rlvr services up)")
    for r in rows:
        typer.echo(f"{r['service']:<14} pid {str(r['pid'] or '-'):<8} {'running' if r['running'] else 'stopped':<8} "
                   f"{r['health']}")
    down_ = [r["service"] for r in rows if not (r["running"] and r["health"] == "ok")]
    if down_:
        typer.echo(f"down: {', '.join(down_)} (`rlvr services up` starts what is down and leaves the rest running)")
        raise typer.Exit(1)


def _deployment() -> tuple[Path, dict]:
    """(services dir, config) of the deployment; the MLflow server becomes this process's
    tracking URI (the tables are read from it)."""
    sd = config.services_dir()
    conf_s = config.load_config(sd)
    if conf_s is None:
        _die(f"no deployment under {sd}: start one with `rlvr services up`")
    os.environ["MLFLOW_TRACKING_URI"] = config.mlflow_url(conf_s)
    return sd, conf_s


def _follow(af: remote.Airflow, dag_id: str, run_id: str, name: str, print_tables: Callable[[str], None],
            timeout: Optional[float]) -> int:
    """Follow the run to its end, print its task table (and the tables on success); the exit code."""
    state, tis = remote.follow(af, dag_id, run_id, _log, timeout=timeout)
    _report(dag_id, state, tis)
    _whole_run(af, dag_id, run_id)
    if state != "success":
        return 1
    print_tables(name)
    return 0


def sweep_on_services(file: Path, cfg: Sweep, rerun: bool, print_tables: Callable[[str], None],
                      timeout: Optional[float] = None) -> int:
    """Trigger the sweep on the deployment's Airflow and follow it; the exit code. A run of
    the same sweep already queued or running is followed instead (``--rerun`` always triggers)."""
    sd, conf_s = _deployment()
    raw = cfg.model_dump(mode="json")
    try:
        af = remote.Airflow(config.airflow_url(conf_s))
        dag_id = remote.submit(af, sd / "sweeps", file, cfg.name, sweep_digest(cfg), 180, _log)
        conf = {"sweep": raw, "seeds": raw["seeds"], "methods": raw["methods"], "rerun": rerun}
        run_id = None if rerun else remote.run_in_flight(af, dag_id, conf)
        if run_id is not None:
            _log(f"following {dag_id} run {run_id}, in flight with this sweep already: "
                 f"{config.airflow_url(conf_s)}/dags/{dag_id}/runs/{run_id}")
        else:
            run_id = remote.trigger(af, dag_id, conf)
            _log(f"triggered {dag_id} run {run_id}: {config.airflow_url(conf_s)}/dags/{dag_id}/runs/{run_id}")
        return _follow(af, dag_id, run_id, cfg.name, print_tables, timeout)
    except ServiceError as e:
        _die(e)


def rerun_on_services(name: str, stage: str, cell: Optional[str], run_id: Optional[str],
                      print_tables: Callable[[str], None], timeout: Optional[float] = None) -> int:
    """Clear a stage (one cell or all) and its downstream in the latest (or named) run of the
    sweep's DAG on the deployment, and follow the run; the exit code."""
    _, conf_s = _deployment()
    dag_id = f"rlvr_{name}"
    try:
        af = remote.Airflow(config.airflow_url(conf_s))
        run_id = run_id or remote.latest_run(af, dag_id)
        labels = (lambda: _grid_keys(name, f"{dag_id}/{run_id}")) if stage == "train" else None
        cleared = remote.clear_stage(af, dag_id, run_id, stage, cell, labels)
        _log(f"cleared in {dag_id} run {run_id}: " + ", ".join(sorted(remote.ti_name(t) for t in cleared)))
        _log(f"{config.airflow_url(conf_s)}/dags/{dag_id}/runs/{run_id}")
        return _follow(af, dag_id, run_id, name, print_tables, timeout)
    except ServiceError as e:
        _die(e)


def _whole_run(af: remote.Airflow, dag_id: str, run_id: str) -> None:
    """After a clear, Airflow's run header times the rerun only: print the whole run's wall
    time (from the sweep's MLflow run, first start to last end) and make it the run's note."""
    from components import sweep_runs
    wall = sweep_runs.sweep_wall_time(f"{dag_id}/{run_id}")
    if wall is None:
        _log(f"no closed MLflow sweep run for {dag_id}/{run_id}: whole-run time unknown")
        return
    _log(f"whole run: {wall}")
    try:
        af.set_note(dag_id, run_id, f"Whole run (first start to last end, all reruns): {wall}")
    except ServiceError as e:   # the run itself is done: say so, keep its exit code
        _log(f"the run's note was not set: {e}")


def _grid_keys(name: str, airflow_run: str) -> list[str]:
    """The train cells' labels in map-index order: the grid of the run's sweep snapshot."""
    import json
    import tempfile

    from components import sweep_runs, tracking
    from components.sweep import parse_sweep
    c = tracking.client()
    exp = c.get_experiment_by_name(name)
    found = c.search_runs([exp.experiment_id], f"tags.`{sweep_runs.RUN_TAG}` = '{airflow_run}'",
                          max_results=1) if exp else []
    if not found:
        return []
    with tempfile.TemporaryDirectory() as td:
        snap = json.loads(Path(c.download_artifacts(found[0].info.run_id, sweep_runs.SNAPSHOT, td)).read_text())
    return [g["key"] for g in parse_sweep(snap, airflow_run).grid()]


def _report(dag_id: str, state: str, tis: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"DAG run {dag_id}: {state}")
    for col in ("task", "map", "state", "try"):
        t.add_column(col)
    for ti in sorted(tis, key=lambda x: (x.get("start_date") is None, x.get("start_date") or "", x["map_index"])):
        t.add_row(ti["task_id"], "" if ti["map_index"] < 0 else str(ti.get("rendered_map_index") or ti["map_index"]),
                  str(ti.get("state")), str(ti.get("try_number")))
    Console(stderr=True).print(t)
