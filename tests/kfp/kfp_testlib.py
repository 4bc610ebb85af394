"""Paths and helpers shared by the Kubeflow tests and their conftest."""
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
KFP_PYTHON = Path(os.environ.get("RLVR_KFP_PYTHON") or REPO / ".venv-kfp" / "bin" / "python")
SWEEPS = sorted((REPO / "dags" / "sweeps").glob("*.yaml"))


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RLVR_", "MLFLOW_"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def compiled(kfp_report: tuple[Path, dict], sweep: Path) -> tuple[dict, Path]:
    """One sweep's entry of tests/kfp/kfp_side.py's report and its compiled pipeline file."""
    out, report = kfp_report
    entry = report[str(sweep)]
    assert "error" not in entry, entry.get("error")
    return entry, out / f"{sweep.stem}.yaml"
