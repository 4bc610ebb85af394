"""``rlvr services up|down|status``: a local deployment for one workstation under
``$RLVR_HOME/services``: PostgreSQL (metadata of both), an MLflow tracking server with
proxied artifact storage (run artifact URIs are ``mlflow-artifacts:/...``), and Airflow as
four processes (api-server, scheduler, dag-processor, triggerer) with the LocalExecutor on
this project's ``dags/``.

Layout of ``$RLVR_HOME/services``: ``config.json`` (ports, generated secrets; mode 0600),
``env.sh`` (the same environment for the ``airflow`` CLI), ``pids.json`` (what ``down``
stops), ``logs/<service>.log``, ``airflow/`` (AIRFLOW_HOME), ``mlflow/artifacts/``,
``sweeps/`` (sweep files submitted with ``rlvr sweep --on-services``), ``postgres/``.

Every service gets RLVR_HOME and MLFLOW_TRACKING_URI (the server); Airflow's task
processes inherit them from the scheduler, so stages write the same store and track to
the same server. The compute stages share the pool ``rlvr_stages`` of ``--parallelism``
(default: cores) slots, each taking as many slots as it uses threads (2 unless the sweep sets
``threads``), so stage tasks never oversubscribe the CPU; the executor has
``BOOKKEEPING_SLOTS`` more workers, the size of the default pool, so the small bookkeeping
tasks run beside them.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from components.services import postgres
from components.services import procs
from components.services.config import (BOOKKEEPING_SLOTS, POOL, airflow_url, db_urls, env, load_config,
                                        make_config, mlflow_url, port_free, services_dir, stage_slots, write_env_sh)
from components.services.postgres import ServiceError

AIRFLOW_PROCS = ("api-server", "scheduler", "dag-processor", "triggerer")
ORDER = ("postgres", "mlflow", *AIRFLOW_PROCS)


def ensure_pools(cfg: dict) -> None:
    """The compute stages' pool (``stage_slots``: a slot per core, a stage task takes as many as
    it uses threads) and the default pool of the bookkeeping tasks; set on every ``up``, since
    Airflow sizes its default pool only when it creates the database."""
    from components.services.remote import Airflow
    af = Airflow(airflow_url(cfg))
    body = {"name": POOL, "slots": stage_slots(cfg), "include_deferred": False,
            "description": "rlvr compute stages: one slot per core, a stage takes as many as it uses threads"}
    if af.call("GET", f"/pools/{POOL}", ok404=True) is None:
        af.call("POST", "/pools", json=body)
    else:
        af.call("PATCH", f"/pools/{POOL}", json=body)
    # Airflow lets only the slots of its default pool change
    af.call("PATCH", "/pools/default_pool", params={"update_mask": "slots"},
            json={"name": "default_pool", "slots": BOOKKEEPING_SLOTS})


# ---------------------------------------------------------------- up / down / status

def _exe(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    return str(exe) if exe.exists() else name


def migrate_airflow_db(airflow_home: Path, e: dict[str, str], log=print) -> None:
    """``airflow db migrate`` (tens of seconds) once per (airflow version, database): a marker
    records what it was done for. ``e`` is the command's whole environment."""
    marker = airflow_home / ".rlvr-migrated"
    conn = e["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    stamp = f"{metadata.version('apache-airflow-core')} {conn}"
    sqlite_gone = conn.startswith("sqlite:///") and not Path(conn.removeprefix("sqlite:///")).exists()
    if marker.exists() and marker.read_text().strip() == stamp and not sqlite_gone:
        return
    airflow_home.mkdir(parents=True, exist_ok=True)
    log("initialising the Airflow metadata DB (once) ...")
    r = subprocess.run([_exe("airflow"), "db", "migrate"], env=e, capture_output=True, text=True, cwd=str(airflow_home))
    (airflow_home / "db-migrate.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        raise ServiceError(f"airflow db migrate failed: {procs.log_tail(airflow_home / 'db-migrate.log')}")
    marker.write_text(stamp + "\n")


PORT_OF = {"postgres": "pg_port", "mlflow": "mlflow_port", "api-server": "airflow_port"}


def up(home: Path | None = None, db: str | None = None, ports: dict[str, int | None] | None = None,
       parallelism: int | None = None, timeout: float = 240.0, log=print) -> dict:
    """Start what is not running and leave what runs (its tasks, its connections) alone. Changed
    settings need the affected services stopped first: on a running deployment they are an error."""
    sd = services_dir(home)
    running = [n for n, r in procs.read_pids(sd).items() if procs.alive(r)]
    old = load_config(sd)
    if running and old is not None:
        asked = {k: v for k, v in {**(ports or {}), "db": db, "parallelism": parallelism}.items() if v is not None}
        changed = {k: v for k, v in asked.items() if old.get(k) != v}
        if changed:
            k, v = next(iter(changed.items()))
            raise ServiceError(f"{', '.join(running)} running with {k}={old.get(k)}, not {v}: "
                               f"`rlvr services down` first to change settings")
    cfg = make_config(sd, db, ports or {}, parallelism)
    wanted = [n for n in ORDER if n != "postgres" or cfg["db"] == "postgres"]
    missing = [n for n in wanted if n not in running]
    if not missing:
        log(f"already up ({', '.join(running)}); `rlvr services restart NAME` restarts one")
        return cfg
    if running:
        log(f"running, left as they are: {', '.join(running)}; starting: {', '.join(missing)}")
    _start(sd, cfg, missing, timeout, log)
    return cfg


def _start(sd: Path, cfg: dict, names: list[str], timeout: float, log) -> None:
    """Start ``names`` (in dependency order) and wait until every service is healthy; on a
    failure stop what this call started."""
    for name in names:  # a dead leader's session may still hold children (a scheduler's tasks)
        if name in procs.read_pids(sd):
            procs.stop(sd, name, grace=10)
    for name in names:
        k = PORT_OF.get(name)
        if k and not port_free(cfg[k]):
            flag = "--" + k.replace("_port", "-port")
            raise ServiceError(f"port {cfg[k]} on 127.0.0.1 is in use ({k}); pick another with {flag}")
    for d in ("logs", "sweeps", "airflow", "mlflow/artifacts"):
        (sd / d).mkdir(parents=True, exist_ok=True)
    e = env(sd, cfg)
    write_env_sh(sd, e)
    started: list[str] = []
    try:
        for name in [n for n in ORDER if n in names]:
            _start_one(sd, cfg, e, name, log)
            started.append(name)
        _wait_healthy(sd, cfg, timeout)
        ensure_pools(cfg)
    except BaseException:
        for name in reversed(started):
            procs.stop(sd, name, grace=10)
        raise
    (sd / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True))


def _start_one(sd: Path, cfg: dict, e: dict[str, str], name: str, log) -> None:
    if name == "postgres":
        data = postgres.data_dir(sd, cfg["key"])
        cfg["pg_data"] = str(data)
        with open(sd / "logs" / "postgres-init.log", "a") as f:
            postgres.init_cluster(data, cfg["pg_password"], f)
        for lock in postgres.clear_stale_locks(data, postgres.socket_dir(data)):
            log(f"postgres: removed {lock.name}, left by a server that is gone")
        rec = procs.start(sd, "postgres", postgres.server_argv(data, cfg["pg_port"], postgres.socket_dir(data)),
                          {k: v for k, v in e.items() if not k.startswith("AIRFLOW")}, user=postgres.run_as(),
                          stop_signal=signal.SIGINT)  # SIGINT: PostgreSQL's fast shutdown
        postgres.wait_ready(cfg, 60, lambda: procs.alive(rec), Path(rec["log"]))
        postgres.ensure_databases(cfg)
    elif name == "mlflow":
        _, ml_db = db_urls(sd, cfg)
        # the store URI (it holds the password) by environment, not argv (visible in ps);
        # no GenAI job runner: its seven huey consumers would cost ~700 MB for nothing here
        ml_env = {**e, "MLFLOW_BACKEND_STORE_URI": ml_db, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
                  "MLFLOW_CONFIGURE_LOGGING": "true"}   # the server's own log file
        procs.start(sd, "mlflow", [_exe("mlflow"), "server",
                                   "--artifacts-destination", (sd / "mlflow" / "artifacts").as_uri(),
                                   "--host", "127.0.0.1", "--port", str(cfg["mlflow_port"]), "--workers", "1"], ml_env)
    else:
        migrate_airflow_db(sd / "airflow", e, log)  # meanwhile MLflow creates its tables
        extra = ["--host", "127.0.0.1", "--port", str(cfg["airflow_port"]), "--workers", "1"] \
            if name == "api-server" else []
        if name == "scheduler":
            end_dead_scheduler_jobs(sd, e, log)
        procs.start(sd, name, [_exe("airflow"), name, *extra], e)


END_SCHEDULER_JOBS = """
from sqlalchemy import update
from airflow.jobs.job import Job, JobState
from airflow.utils.session import create_session
with create_session() as s:
    r = s.execute(update(Job).where(Job.job_type == "SchedulerJob", Job.state == JobState.RUNNING)
                  .values(state=JobState.FAILED))
    print(r.rowcount)
"""


def end_dead_scheduler_jobs(sd: Path, e: dict[str, str], log) -> int:
    """Mark the scheduler jobs that the database still holds as running failed, just before this
    deployment's only scheduler starts: the earlier one is gone (stopped, or its session was
    lost with the machine). Airflow would wait for a job's heartbeat to go stale
    (``scheduler_health_check_threshold``) before resetting its tasks, and a restart inside
    that window leaves them to the task-heartbeat timeout, which fails them instead; ended
    here, the new scheduler resets them at start and they run again (a train task resumes
    from its checkpoint) without spending a retry."""
    r = subprocess.run([sys.executable, "-c", END_SCHEDULER_JOBS], env=e, capture_output=True, text=True,
                       cwd=str(sd / "airflow"))
    if r.returncode != 0:
        (sd / "logs" / "end-scheduler-jobs.log").write_text(r.stdout + r.stderr)
        raise ServiceError("could not end the earlier scheduler's jobs: "
                           f"{procs.log_tail(sd / 'logs' / 'end-scheduler-jobs.log')}")
    n = int(r.stdout.split()[-1])
    if n:
        log(f"scheduler: {n} earlier scheduler job(s) no longer run; their unfinished tasks run again")
    return n


def restart(names: list[str], home: Path | None = None, timeout: float = 240.0, force: bool = False,
            log=print) -> list[str]:
    """Stop ``names`` (default: every service) and start them again, leaving the others
    running. Restarting the scheduler ends the tasks it runs: refused while any runs, unless
    ``force``."""
    sd = services_dir(home)
    cfg = load_config(sd)
    if cfg is None:
        raise ServiceError(f"no deployment under {sd} (rlvr services up)")
    known = [n for n in ORDER if n != "postgres" or cfg["db"] == "postgres"]
    bad = [n for n in names if n not in known]
    if bad:
        raise ServiceError(f"unknown service {bad[0]!r} (services: {', '.join(known)})")
    names = [n for n in known if n in (names or known)]
    if "scheduler" in names and not force:
        tasks = running_tasks(cfg)
        if tasks:
            raise ServiceError(f"the scheduler runs {len(tasks)} task(s) ({', '.join(tasks[:5])}); restarting it "
                               "ends them: wait, or --force")
    for name in reversed(names):
        if name in procs.read_pids(sd):
            log(f"{name}: {procs.stop(sd, name)}")
    _start(sd, cfg, names, timeout, log)
    return names


def running_tasks(cfg: dict) -> list[str]:
    """``dag/run/task[map]`` of every running task instance (empty when the api-server does not
    answer: there is then nobody to ask)."""
    from components.services.remote import Airflow, ti_name
    try:
        af = Airflow(airflow_url(cfg))
        tis = af.call("GET", "/dags/~/dagRuns/~/taskInstances", params={"state": "running", "limit": 100})
    except ServiceError:
        return []
    return [f"{t['dag_id']}/{t['dag_run_id']}/{ti_name(t)}" for t in tis["task_instances"]]


def _wait_healthy(sd: Path, cfg: dict, timeout: float) -> None:
    t_end = time.monotonic() + timeout
    while True:
        pids = procs.read_pids(sd)
        dead = [n for n in ORDER if n in pids and not procs.alive(pids[n])]
        if dead:
            raise ServiceError(f"{dead[0]} exited while starting: {procs.log_tail(pids[dead[0]]['log'])} "
                               f"(log: {pids[dead[0]]['log']})")
        health = check(sd, cfg)
        bad = {n: h for n, h in health.items() if h != "ok"}
        if not bad:
            return
        if time.monotonic() > t_end:
            n, h = next(iter(bad.items()))
            raise ServiceError(f"{n} not healthy after {timeout:.0f}s: {h} (log: {sd / 'logs' / (n + '.log')})")
        time.sleep(1.0)


def check(sd: Path, cfg: dict) -> dict[str, str]:
    """Health of each service in words ("ok" or why not): PostgreSQL by a connection,
    MLflow by ``/health``, Airflow's four components by ``/api/v2/monitor/health``."""
    import httpx
    out: dict[str, str] = {}
    if cfg["db"] == "postgres":
        out["postgres"] = postgres.healthy(cfg)
    try:
        r = httpx.get(mlflow_url(cfg) + "/health", timeout=3)
        out["mlflow"] = "ok" if r.status_code == 200 else f"HTTP {r.status_code}"
    except httpx.HTTPError as e:
        out["mlflow"] = f"no answer at {mlflow_url(cfg)} ({type(e).__name__})"
    try:
        r = httpx.get(airflow_url(cfg) + "/api/v2/monitor/health", timeout=5)
        h = r.json() if r.status_code == 200 else {}
        out["api-server"] = "ok" if r.status_code == 200 else f"HTTP {r.status_code}"
        for name, key in (("scheduler", "scheduler"), ("dag-processor", "dag_processor"), ("triggerer", "triggerer")):
            s = (h.get(key) or {}).get("status")
            out[name] = "ok" if s == "healthy" else f"{s or 'no heartbeat yet'}"
    except (httpx.HTTPError, ValueError) as e:
        out["api-server"] = f"no answer at {airflow_url(cfg)} ({type(e).__name__})"
        for name in AIRFLOW_PROCS[1:]:
            out[name] = "unknown (api-server down)"
    return out


def down(home: Path | None = None, log=print, purge: bool = False) -> dict[str, str]:
    """Stop what ``up`` started; ``purge`` then deletes the deployment's data too (its
    databases, logs and config; the PostgreSQL data directory also where it lives outside)."""
    sd = services_dir(home)
    said = {}
    for name in reversed(ORDER):
        if name in procs.read_pids(sd):
            said[name] = procs.stop(sd, name)
            log(f"{name}: {said[name]}")
    for name in list(procs.read_pids(sd)):  # anything recorded under another name
        said[name] = procs.stop(sd, name)
    if purge and sd.exists():
        import shutil
        cfg = load_config(sd) or {}
        if cfg.get("pg_data") and not Path(cfg["pg_data"]).resolve().is_relative_to(sd.resolve()):
            shutil.rmtree(cfg["pg_data"], ignore_errors=True)
            shutil.rmtree(f"{cfg['pg_data']}-sockets", ignore_errors=True)
        shutil.rmtree(sd, ignore_errors=True)
        log(f"purged {sd}")
    return said


def status(home: Path | None = None) -> list[dict]:
    sd = services_dir(home)
    cfg = load_config(sd)
    pids = procs.read_pids(sd)
    if cfg is None:
        return []
    health = check(sd, cfg)
    rows = []
    for name in ORDER:
        if name == "postgres" and cfg["db"] != "postgres":
            continue
        rec = pids.get(name)
        rows.append({"service": name, "pid": rec["pid"] if rec else None,
                     "running": bool(rec and procs.alive(rec)), "health": health.get(name, "?"),
                     "log": rec["log"] if rec else str(sd / "logs" / f"{name}.log")})
    return rows
