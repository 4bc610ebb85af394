"""The ``rlvr`` commands a pod or a RayJob runs: one unit of work, JSON in, JSON out.

- ``rlvr run-stage NAME --params JSON --inputs JSON``  one cached stage (what an Airflow task
  or a Kubernetes pod runs); prints the result dict as JSON (a pod also writes it to
  ``--xcom-file /airflow/xcom/return.json`` for KubernetesPodOperator);
- ``rlvr train-verl --params JSON --inputs JSON --out DIR [KEY=VALUE ...]``  one verl run
  outside the cache (a KubeRay RayJob, the GPU smoke test; ``components/trainer/verl/job.py``).

``components/cli.py`` registers them on the one ``rlvr`` app.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from components import lineage, receipts
from components.artifacts import write_atomic


def _die(msg: str, code: int = 2) -> None:
    typer.echo(" ".join(msg.split()), err=True)
    raise typer.Exit(code)


def _json_arg(text: str, what: str) -> dict:
    try:
        value = json.loads(Path(text[1:]).read_text() if text.startswith("@") else text)
    except (OSError, ValueError) as e:
        _die(f"--{what}: not valid JSON ({e})")
    if not isinstance(value, dict):
        _die(f"--{what}: expected a JSON object")
    return value


RESULT_KEYS = ("stage", "uri", "digest", "run_id", "cache_key", "cached", "summary")  # lineage.run_stage's


def run_stage_cmd(name: str = typer.Argument(..., help="stage name"),
                  params: str = typer.Option("{}", "--params", help="JSON object (or @file)"),
                  inputs: str = typer.Option("{}", "--inputs", help="JSON {input name: artifact uri} (or @file)"),
                  sweep_name: str = typer.Option("default", "--sweep", help="MLflow experiment"),
                  parent_run_id: Optional[str] = typer.Option(None, "--parent-run-id"),
                  force: bool = typer.Option(False, "--force", help="recompute even when cached"),
                  extra: str = typer.Option("{}", "--extra",
                                            help="JSON object merged into the result (the DAG cell it is for)"),
                  xcom_file: Optional[Path] = typer.Option(
                      None, "--xcom-file", help="also write the result JSON here (a pod: /airflow/xcom/return.json)"),
                  ) -> None:
    """Run one stage through the cache; print {stage, uri, digest, run_id, cache_key, cached, summary}."""
    p, i, x = _json_arg(params, "params"), _json_arg(inputs, "inputs"), _json_arg(extra, "extra")
    # --extra labels the result with its DAG cell (model, grid key, eval label): a mapped
    # pod's XCom then says which cell it is, as the local-mode tasks' results do.
    if clash := sorted(set(x) & set(RESULT_KEYS)):
        _die(f"--extra: key '{clash[0]}' would overwrite the stage result")
    try:
        result = lineage.run_stage(name, p, i, sweep=sweep_name, parent_run_id=parent_run_id, force=force, cell=x)
    except lineage.StageError as e:
        _die(str(e))
    receipts.record(name, p, i, result)   # a stage task of `rlvr sweep` (its cached-rerun check)
    text = json.dumps({**result, **x}, sort_keys=True)
    if xcom_file is not None:
        try:
            write_atomic(xcom_file, text + "\n")
        except OSError as e:  # the stage itself finished and is cached; only the hand-back failed
            _die(f"--xcom-file: {xcom_file}: {e.strerror or e}", 1)
    typer.echo(text)


def train_verl_cmd(params: str = typer.Option(..., "--params", help="train params (JSON or @file)"),
                   inputs: str = typer.Option(..., "--inputs", help='{"model": DIR, "hard": DIR, "prefixes": DIR} '
                                                                   "(JSON or @file)"),
                   out: Path = typer.Option(..., "--out", help="output directory (model/, metrics.jsonl, ...)"),
                   work: Optional[Path] = typer.Option(None, "--work", help="checkpoint directory (resume)"),
                   sweep_name: str = typer.Option("rlvr", "--sweep", help="MLflow experiment / verl project name"),
                   overrides: Optional[list[str]] = typer.Argument(
                       None, metavar="KEY=VALUE", help="verl Hydra overrides, applied last (trainer.nnodes=2)"),
                   ) -> None:
    """One verl training run outside the lineage cache; metrics go to $MLFLOW_RUN_ID when set."""
    from components.trainer.verl.job import JobError, verl_job
    try:
        p, ctx = verl_job(_json_arg(params, "params"), _json_arg(inputs, "inputs"), out, work, sweep_name,
                          overrides or [])
    except JobError as e:
        _die(str(e))
    ctx.tracker.run_id = os.environ.get("MLFLOW_RUN_ID", "")
    from components.trainer.verl.run import train_with_verl
    typer.echo(json.dumps(train_with_verl(p, ctx), indent=2))


