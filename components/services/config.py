"""The configuration of a ``rlvr services`` deployment: ``config.json`` (ports, generated
secrets), the environment every service and task gets, and the URLs and ports derived from
them. Starting and stopping the services is ``components/services/deploy.py``."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import socket
from pathlib import Path

from components.artifacts import rlvr_home
from components.services import postgres

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
DEFAULT_PORTS = {"airflow_port": 8080, "mlflow_port": 5000, "pg_port": 5433}
# LocalExecutor whose workers import torch / transformers / math-verify / mlflow once, so
# each task process forks warm instead of importing them again (components/services/executor.py)
EXECUTOR = "components.services.executor.WarmLocalExecutor"
POOL = "rlvr_stages"
# executor workers (and default-pool slots) beyond the stage pool, for the bookkeeping tasks
# (start/end of a sweep run, the plan tasks): they run beside the stages. Without them such a
# task waits in the executor's queue behind the stages, and Airflow fails a task queued longer
# than [scheduler] task_queued_timeout (a try spent, the run failed after its retries).
BOOKKEEPING_SLOTS = 2


def services_dir(home: Path | None = None) -> Path:
    return (home or rlvr_home()) / "services"


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def stage_threads() -> int:
    """Threads one compute stage uses (components/stages/common.py's set_threads default)."""
    return min(2, cores())


def stage_slots(cfg: dict) -> int:
    """Slots of the stage pool: ``parallelism`` cores' worth of stage threads (at least one
    stage's default threads, so that a stage can run at all)."""
    return max(cfg["parallelism"], stage_threads())


def load_config(sd: Path) -> dict | None:
    f = sd / "config.json"
    return json.loads(f.read_text()) if f.exists() else None


def make_config(sd: Path, db: str | None, ports: dict[str, int | None], parallelism: int | None) -> dict:
    """config.json: created once (secrets persist across restarts); ports, database kind and
    parallelism given on the command line replace the stored ones."""
    cfg = load_config(sd) or {
        "pg_password": secrets.token_urlsafe(24), "jwt_secret": secrets.token_urlsafe(32),
        "api_secret": secrets.token_urlsafe(32),
        "fernet_key": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        "key": hashlib.sha256(str(sd.resolve()).encode()).hexdigest()[:12], **DEFAULT_PORTS,
        "db": None, "parallelism": None}
    cfg.update({k: int(v) for k, v in ports.items() if v is not None})
    cfg["db"] = db or cfg["db"] or ("postgres" if postgres.available() else "sqlite")
    cfg["parallelism"] = max(1, (cfg["parallelism"] if parallelism is None else parallelism) or cores())
    sd.mkdir(parents=True, exist_ok=True)
    f = sd / "config.json"
    f.write_text(json.dumps(cfg, indent=1, sort_keys=True))
    f.chmod(0o600)
    return cfg


def airflow_url(cfg: dict) -> str:
    return f"http://127.0.0.1:{cfg['airflow_port']}"


def mlflow_url(cfg: dict) -> str:
    return f"http://127.0.0.1:{cfg['mlflow_port']}"


def db_urls(sd: Path, cfg: dict) -> tuple[str, str]:
    """(Airflow's SQLAlchemy URL, MLflow's backend store URI)."""
    if cfg["db"] == "postgres":
        return postgres.url(cfg, "airflow", "psycopg2"), postgres.url(cfg, "mlflow", "psycopg2")
    return f"sqlite:///{sd / 'airflow' / 'airflow.db'}", f"sqlite:///{sd / 'mlflow' / 'mlflow.db'}"


def env(sd: Path, cfg: dict) -> dict[str, str]:
    """The environment of every service (and, through the scheduler, of every task)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "RLVR_"))}
    af_db, _ = db_urls(sd, cfg)
    threads = str(stage_threads())
    workers = str(stage_slots(cfg) + BOOKKEEPING_SLOTS)
    url = airflow_url(cfg)
    return {**base,
            "RLVR_HOME": str(sd.parent), "RLVR_EXTRA_SWEEPS": str(sd / "sweeps"),
            "MLFLOW_TRACKING_URI": mlflow_url(cfg),
            # MLflow's telemetry client sets / pops an os.environ key from its own thread while
            # requests (the REST store) iterates os.environ in another: KeyError mid-call in
            # tasks that log to the server (seen under load); and it phones home
            "MLFLOW_DISABLE_TELEMETRY": "true",
            # mlflow's own stderr handler would put its INFO lines in task logs as ERROR (a task's
            # stderr is logged at ERROR); unconfigured, its records reach Airflow's handlers at their level
            "MLFLOW_CONFIGURE_LOGGING": "false",
            "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
            "RLVR_STAGE_POOL": POOL, "RLVR_STAGE_POOL_SLOTS": threads,
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH", "")) if p),
            "AIRFLOW_HOME": str(sd / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": EXECUTOR,
            "AIRFLOW__CORE__PARALLELISM": workers,
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": workers,
            "AIRFLOW__CORE__DEFAULT_POOL_TASK_SLOT_COUNT": str(BOOKKEEPING_SLOTS),
            "AIRFLOW__CORE__FERNET_KEY": cfg["fernet_key"],
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",   # one workstation, one user
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": af_db,
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(cfg["airflow_port"]),
            "AIRFLOW__API__SECRET_KEY": cfg["api_secret"],
            "AIRFLOW__API_AUTH__JWT_SECRET": cfg["jwt_secret"],
            # `rlvr sweep --on-services` asks for a re-parse of the DAG file over REST, so the
            # periodic re-parse (about 1 CPU-s each time) can stay at Airflow's default pace
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            # a workstation's scheduler shares its cores with the training stages: at load ~10 on
            # 2 cores its 5 s heartbeat was seen > 30 s (the default) late while it kept scheduling
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "120",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "120",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO"}


def write_env_sh(sd: Path, e: dict[str, str]) -> None:
    keep = {k: v for k, v in e.items() if k.startswith(("AIRFLOW", "MLFLOW_", "RLVR_"))}
    f = sd / "env.sh"
    f.write_text("# source this to point the airflow / mlflow CLIs at the deployment\n"
                 + "".join(f"export {k}='{v}'\n" for k, v in sorted(keep.items())))
    f.chmod(0o600)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now: a deployment beside another one (tests, benchmarks)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
