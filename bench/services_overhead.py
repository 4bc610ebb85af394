"""Wall time of one sweep, full recompute, two ways: embedded (`rlvr sweep FILE --rerun`:
dag.test in one process on SQLite) and through the local deployment (`rlvr sweep FILE
--on-services --rerun`: REST trigger, scheduler, LocalExecutor task processes, PostgreSQL,
MLflow server). Prints both times and the ratio.

Set-up that is paid once is not counted: the embedded Airflow DB migration (a first run
in the embedded home), and `rlvr services up` (a deployment is long-lived). Both paths get
the same sweep file with its own name and its own RLVR_HOME, so neither sees the other's
cache; `--rerun` recomputes every stage.

    .venv/bin/python bench/services_overhead.py [SWEEP.yaml] [--repeat N]

Default sweep: the one of tests/services/test_services_e2e.py (real stages, tiny sizes).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from components.services import config as services_config

REPO = Path(__file__).resolve().parents[1]
KEEP: list[bool] = []


def _run(argv: list[str], env: dict, label: str) -> float:
    t0 = time.monotonic()
    r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        KEEP.append(True)  # keep the deployment's files (logs) for a look
        sys.exit(f"{label} failed (exit {r.returncode}): {r.stderr[-2000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep", nargs="?", help="sweep YAML (default: the services test's tiny sweep)")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    if args.sweep:
        text = Path(args.sweep).read_text()
    else:
        spec = importlib.util.spec_from_file_location("services_e2e", REPO / "tests" / "services" / "test_services_e2e.py")
        e2e = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(e2e)
        text = e2e.SWEEP
    name = re.search(r"(?m)^name:\s*(\S+)", text).group(1)
    root = Path(tempfile.mkdtemp(prefix="rlvr-bench-services-", dir="/tmp"))
    root.chmod(0o755)  # the postgres system user must reach its data dir when we are root
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "RLVR_"))}
    base["PYTHONPATH"] = str(REPO)
    cli = [sys.executable, "-m", "components.cli"]
    sweep = root / f"{name}.yaml"
    sweep.write_text(text)
    emb = {**base, "RLVR_HOME": str(root / "embedded")}
    svc = {**base, "RLVR_HOME": str(root / "services")}
    try:
        print("set-up (not timed): embedded Airflow DB, rlvr services up ...", flush=True)
        _run(cli + ["sweep", str(sweep)], emb, "embedded warm-up run")
        af, ml, pg = services_config.free_ports(3)
        t_up = _run(cli + ["services", "up", "--airflow-port", str(af), "--mlflow-port", str(ml),
                           "--pg-port", str(pg)], svc, "rlvr services up")
        _run(cli + ["sweep", str(sweep), "--on-services"], svc, "services warm-up run")  # DAG parsed, pool made
        emb_t, svc_t = [], []
        for i in range(args.repeat):
            svc_t.append(_run(cli + ["sweep", str(sweep), "--on-services", "--rerun"], svc, "services run"))
            emb_t.append(_run(cli + ["sweep", str(sweep), "--rerun", "--dag"], emb, "embedded run"))
            print(f"run {i + 1}: embedded {emb_t[-1]:.1f}s, services {svc_t[-1]:.1f}s", flush=True)
        e, s = min(emb_t), min(svc_t)
        print(f"\nservices up (once): {t_up:.1f}s")
        print(f"embedded (rlvr sweep --rerun):          {e:.1f}s")
        print(f"services (rlvr sweep --on-services --rerun): {s:.1f}s")
        print(f"ratio services / embedded: {s / e:.2f}x  (best of {args.repeat}; load avg {os.getloadavg()[0]:.1f})")
    finally:
        subprocess.run(cli + ["services", "down"], cwd=REPO, env=svc, capture_output=True, text=True)
        cfg = services_config.load_config(root / "services" / "services") or {}
        if KEEP:
            print(f"files kept for a look: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
            if cfg.get("pg_data") and not str(cfg["pg_data"]).startswith(str(root)):
                shutil.rmtree(cfg["pg_data"], ignore_errors=True)


if __name__ == "__main__":
    main()
