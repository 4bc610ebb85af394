"""The deployment's PostgreSQL: Debian's server binaries (``postgresql-15``), one cluster per
deployment, listening on 127.0.0.1 only, password auth, databases ``airflow`` and ``mlflow``.

Why Debian's server and not the ``pgserver`` wheel: it is what a workstation (and the CI
image, ``.ci/run``) installs with apt, it is maintained with security updates, and it
needs no second copy of PostgreSQL inside the virtual environment. PostgreSQL refuses to
run as root: when we are root the server runs as the ``postgres`` system user (set by
``Popen(user=...)``), and its data directory is owned by that user.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import psutil

from components.services import procs

DBS = ("airflow", "mlflow")
SUPERUSER = "rlvr"


class ServiceError(RuntimeError):
    """A service cannot be started / reached; ``str`` is one line saying what and where."""


def bin_dir() -> Path:
    """The directory holding ``initdb`` and ``postgres``: $RLVR_PG_BIN, ``pg_config --bindir``,
    the newest /usr/lib/postgresql/*/bin, or the PATH."""
    cands = [os.environ.get("RLVR_PG_BIN", "")]
    if exe := shutil.which("pg_config"):
        r = subprocess.run([exe, "--bindir"], capture_output=True, text=True)
        cands.append(r.stdout.strip() if r.returncode == 0 else "")
    cands += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)
    if exe := shutil.which("initdb"):
        cands.append(str(Path(exe).resolve().parent))
    for c in cands:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "postgres").is_file():
            return Path(c)
    raise ServiceError("PostgreSQL server binaries not found (initdb, postgres): install Debian's 'postgresql' "
                       "(apt-get install postgresql), set RLVR_PG_BIN, or use --db sqlite")


def available() -> bool:
    try:
        bin_dir()
        import psycopg2  # noqa: F401 - the driver Airflow and MLflow connect with
    except (ServiceError, ImportError):
        return False
    return True


def run_as() -> str | None:
    """The OS user the server runs as: None (ourselves), or 'postgres' when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise ServiceError("running as root, and there is no 'postgres' system user to run PostgreSQL as "
                           "(PostgreSQL refuses to run as root): install Debian's 'postgresql' or use --db sqlite") from None
    return "postgres"


def _reachable(user: str, path: Path) -> bool:
    return subprocess.run(["test", "-x", str(path)], user=user, capture_output=True).returncode == 0


def data_dir(services: Path, key: str) -> Path:
    """``<services>/postgres`` when the server's user can reach it; as root under a private
    parent (pytest's 0700 tmp dirs, /root), ``~postgres/rlvr-<key>`` instead."""
    here = services / "postgres"
    user = run_as()
    if user is None or _reachable(user, services):
        return here
    return Path(pwd.getpwnam(user).pw_dir) / f"rlvr-{key}"


def _chown(path: Path, user: str | None) -> None:
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def init_cluster(data: Path, password: str, log) -> None:
    """``initdb`` once (superuser ``rlvr``, scram-sha-256 everywhere)."""
    if (data / "PG_VERSION").exists():
        return
    user = run_as()
    data.mkdir(parents=True, exist_ok=True)
    data.chmod(0o700)
    _chown(data, user)
    pwfile = data.parent / f".pw-{os.getpid()}"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    _chown(pwfile, user)
    try:
        r = subprocess.run([str(bin_dir() / "initdb"), "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}",
                            "--auth=scram-sha-256", "-E", "UTF8", "--locale=C"],
                           user=user, capture_output=True, text=True, cwd="/")
    finally:
        pwfile.unlink(missing_ok=True)
    log.write(r.stdout + r.stderr)
    if r.returncode != 0:
        shutil.rmtree(data, ignore_errors=True)
        tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:])
        raise ServiceError(f"initdb {data} failed: {tail}")


def clear_stale_locks(data: Path, sockets: Path) -> list[Path]:
    """Remove the lock files (``postmaster.pid``, the socket's ``.s.PGSQL.<port>.lock``) whose
    server is gone: no such process, or a zombie not reaped yet (a server killed a moment ago).
    PostgreSQL removes a lock whose pid does not exist by itself, but takes a zombie's pid for a
    running server and refuses to start. Only called for a deployment whose own server is not
    running."""
    removed = []
    for lock in [data / "postmaster.pid", *sockets.glob(".s.PGSQL.*.lock")]:
        try:
            pid = int(lock.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                continue
        except psutil.NoSuchProcess:
            pass
        lock.unlink(missing_ok=True)
        removed.append(lock)
    return removed


def server_argv(data: Path, port: int, sockets: Path) -> list[str]:
    return [str(bin_dir() / "postgres"), "-D", str(data), "-p", str(port), "-c", "listen_addresses=127.0.0.1",
            "-c", f"unix_socket_directories={sockets}", "-c", "max_connections=200"]


def socket_dir(data: Path) -> Path:
    d = data.parent / f"{data.name}-sockets"
    d.mkdir(parents=True, exist_ok=True)
    _chown(d, run_as())
    return d


def url(cfg: dict, db: str, driver: str = "") -> str:
    scheme = "postgresql+" + driver if driver else "postgresql"
    return f"{scheme}://{SUPERUSER}:{cfg['pg_password']}@127.0.0.1:{cfg['pg_port']}/{db}"


def wait_ready(cfg: dict, timeout: float, alive, log: Path) -> None:
    import psycopg2
    t_end = time.monotonic() + timeout
    err = ""
    while time.monotonic() < t_end:
        if not alive():
            raise ServiceError(f"postgres exited while starting: {procs.log_tail(log, 3)} (log: {log})")
        try:
            psycopg2.connect(url(cfg, "postgres"), connect_timeout=2).close()
            return
        except psycopg2.OperationalError as e:
            err = " ".join(str(e).split())
        time.sleep(0.3)
    raise ServiceError(f"postgres on 127.0.0.1:{cfg['pg_port']} not ready after {timeout:.0f}s: {err}")


def ensure_databases(cfg: dict) -> None:
    import psycopg2
    con = psycopg2.connect(url(cfg, "postgres"))
    con.autocommit = True  # CREATE DATABASE cannot run inside a transaction
    try:
        with con.cursor() as cur:
            for db in DBS:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{db}"')
    finally:
        con.close()


def healthy(cfg: dict) -> str:
    import psycopg2
    try:
        psycopg2.connect(url(cfg, "postgres"), connect_timeout=2).close()
        return "ok"
    except psycopg2.OperationalError as e:
        return " ".join(str(e).split())[:200]
