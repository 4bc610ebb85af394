"""The ``rlvr`` CLI: a real embedded sweep (Airflow dag.test on SQLite, MLflow on SQLite)
with toy stages swapped in through RLVR_STAGE_OVERRIDES, then a fully cached rerun.

`rlvr sweep` runs in a subprocess (twice): Airflow fixes its configuration at first import,
and the command points it at a private AIRFLOW_HOME. The slow `airflow db migrate`
happens once, in the module fixture.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import toy_stages
from components import lineage
from components.cli import app

REPO = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).resolve().parent / "support"
PARTS = {"retries": 1, "method_config": {"vsr": {"rho": 0.5}}, "train": {"steps": 2}, "evaluate": {"samples": 2}}
SWEEP = toy_stages.toy_sweep("clitest", **PARTS)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "MLFLOW_", "TOY_", "RLVR_"))}
    env.update({"RLVR_HOME": str(home), lineage.OVERRIDES_ENV: json.dumps(toy_stages.OVERRIDES),
                "PYTHONPATH": os.pathsep.join([str(SUPPORT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                "TOY_CALLS": str(home.parent / "calls.txt")})
    return env


def _stage_runs(home: Path, monkeypatch) -> list:
    monkeypatch.setenv("RLVR_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    c = lineage.client()
    exp = c.get_experiment_by_name("clitest")
    return c.search_runs([exp.experiment_id], max_results=1000)


# Runs `rlvr sweep` twice in ONE subprocess (typer standalone_mode=False gives the exit
# code back): the second run must be all cache hits, and sharing the process saves the
# ~15 s of Airflow + MLflow start-up that a second process would cost. Nothing is
# cached in memory between the runs: hits come from MLflow + the artifact store.
DRIVER = """
import os, sys, time
from pathlib import Path
from components.cli import app
codes = []
for i in range(4):
    args = ["sweep", sys.argv[1]]
    if i == 3:  # rerun one cell of one stage: it alone is recomputed, downstream is the cache
        args = ["rerun", sys.argv[1], "train", "--cell", "tiny-vsr-s0"]
    if i == 2:  # tamper with one finished artifact: the receipt check must notice and run the DAG
        victim = sorted((Path(os.environ["RLVR_HOME"]) / "artifacts" / "evaluate").glob("*/out.json"))[0]
        victim.write_text(victim.read_text() + " ")
    t = time.time()
    try:
        app(args, standalone_mode=False)
        codes.append(0)
    except SystemExit as e:
        codes.append(e.code)
    except Exception as e:  # typer.Exit surfaces as click's Exit here
        codes.append(getattr(e, "exit_code", repr(e)))
    print(f"@@RUN{i} rc={codes[-1]} {time.time() - t:.1f}s", file=sys.stderr, flush=True)
"""


@pytest.fixture(scope="module")
def two_sweeps(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    home = root / "rlvr"
    (root / "clitest.yaml").write_text(SWEEP)
    toy_stages.premigrated_mlflow_db(home)  # the Airflow DB is still migrated by `rlvr sweep`
    r = subprocess.run([sys.executable, "-c", DRIVER, str(root / "clitest.yaml")], cwd=root, env=_env(home),
                       capture_output=True, text=True, timeout=300)
    first, _, rest = r.stderr.partition("@@RUN0")
    second, _, rest = rest.partition("@@RUN1")
    third, _, fourth = rest.partition("@@RUN2")
    return home, r, first, second, third, fourth


def test_sweep_runs_end_to_end_then_all_cached(two_sweeps, monkeypatch):
    home, r, first, second, third, fourth = two_sweeps
    print(*[ln for ln in r.stderr.splitlines() if ln.startswith("@@RUN")], sep="\n")
    assert all(f"@@RUN{i} rc=0" in r.stderr for i in range(4)), r.stderr[-4000:]
    assert "rlvr ui" in first and "mlflow.db" in first and "success" in first
    assert "initialising the Airflow metadata DB" in first
    assert (home / "airflow" / ".rlvr-migrated").exists()
    # run 2: the receipt of run 1 shows every stage call cached: Airflow is not started
    assert "all 11 stage calls of its last successful run are cached" in second and "Airflow not started" in second
    assert "DAG run" not in second and "rlvr ui" in second
    assert r.stdout.count("eval_tiny-vsr-s0") == 4               # the tables, printed by each run
    # run 3: a tampered artifact fails the check; the DAG runs and recomputes that one stage
    assert "running the DAG: evaluate: output" in third and "success" in third
    assert "initialising the Airflow metadata DB" not in third  # migrated once
    calls = (home.parent / "calls.txt").read_text().split()
    assert sorted(calls) == sorted(["prepare_data", "pretrain", "filter_hard", "seed_prefixes", "train", "train",
                                    "evaluate", "evaluate", "evaluate", "tokens", "tables", "evaluate", "train"])
    runs = _stage_runs(home, monkeypatch)
    parents = sorted((x for x in runs if x.data.tags.get("rlvr.kind") == "sweep"), key=lambda x: x.info.start_time)
    children = [x for x in runs if "rlvr.stage" in x.data.tags]
    assert len(parents) == 3 and all(p.info.status == "FINISHED" for p in parents)   # runs 1, 3 and the rerun
    assert all("| eval_tiny-vsr-s0 | 0.5 |" in p.data.tags["mlflow.note.content"] for p in parents)   # tables.md
    assert len(children) == 13 and len(runs) == 16
    rerun = [x for x in children if x.data.tags["mlflow.parentRunId"] == parents[2].info.run_id]
    assert [(x.data.tags["rlvr.stage"], x.data.tags["rlvr.label"]) for x in rerun] == [("train", "tiny-vsr-s0")]
    assert sum(x.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for x in children) == 11
    assert all(x.info.status == "FINISHED" for x in children)

    tables = CliRunner().invoke(app, ["tables", "clitest"])
    assert tables.exit_code == 0, tables.output
    assert "eval_tiny-vsr-s0" in tables.stdout and "eval_tiny-base" in tables.stdout


def test_run_stage_command(tmp_path, monkeypatch):
    home = tmp_path / "rlvr"
    for k, v in _env(home).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    toy_stages.premigrated_mlflow_db(home)
    runner = CliRunner()
    ok = runner.invoke(app, ["run-stage", "prepare_data", "--params", '{"n": 3}', "--sweep", "rs"])
    assert ok.exit_code == 0, ok.output
    res = json.loads(ok.stdout)
    assert set(res) == {"stage", "uri", "digest", "run_id", "cache_key", "cached", "summary"}
    assert res["cached"] is False and Path(res["uri"]).is_dir()
    inputs = json.dumps({"data": res["uri"]})
    model = json.loads(runner.invoke(app, ["run-stage", "pretrain", "--inputs", inputs, "--sweep", "rs"]).stdout)
    assert model["stage"] == "pretrain" and not model["cached"]
    again = runner.invoke(app, ["run-stage", "prepare_data", "--params", '{"n": 3}', "--sweep", "rs"])
    assert json.loads(again.stdout)["cached"] is True
    bad = runner.invoke(app, ["run-stage", "filter_hard", "--params", '{"k": "x"}'])
    assert bad.exit_code == 2
    assert bad.stderr.count("\n") == 1 and "params.k" in bad.stderr and "filter_hard" in bad.stderr
    missing = runner.invoke(app, ["run-stage", "pretrain", "--inputs", '{"data": "/no/such"}'])
    assert missing.exit_code == 2 and "/no/such" in missing.stderr
    notjson = runner.invoke(app, ["run-stage", "pretrain", "--params", "{nope"])
    assert notjson.exit_code == 2 and "--params" in notjson.stderr


def test_bad_sweep_exits_2_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    bad = tmp_path / "bad.yaml"
    bad.write_text(toy_stages.toy_sweep("clitest", methods=("grpo", "vsrx"), **PARTS))
    r = CliRunner().invoke(app, ["sweep", str(bad)])
    assert r.exit_code == 2
    assert r.stderr == f"{bad}: methods: unknown method 'vsrx' (available: " + r.stderr.split("(available: ")[1]
    assert r.stderr.count("\n") == 1
    assert not (tmp_path / "rlvr" / "airflow").exists()  # nothing ran


def test_sweep_preflight_checks_stage_params(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    monkeypatch.setenv(lineage.OVERRIDES_ENV, json.dumps(toy_stages.OVERRIDES))
    bad = tmp_path / "bad.yaml"
    bad.write_text(toy_stages.toy_sweep("clitest", **{**PARTS, "train": {"steps": 2, "bogus": 1}}))
    r = CliRunner().invoke(app, ["sweep", str(bad)])
    assert r.exit_code == 2 and r.stderr == f"{bad}: stages.train.bogus: unknown parameter\n"
    bad.write_text(toy_stages.toy_sweep("clitest", **{**PARTS, "evaluate": {"samples": "x"}}))
    r = CliRunner().invoke(app, ["sweep", str(bad)])
    assert r.exit_code == 2 and r.stderr.startswith(f"{bad}: stages.evaluate.samples: ")
    assert not (tmp_path / "rlvr" / "airflow").exists()


def test_ui_execs_mlflow_on_the_project_store(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    seen = []
    monkeypatch.setattr(os, "execvp", lambda prog, argv: seen.append(argv))
    r = CliRunner().invoke(app, ["ui", "--port", "5123"])
    assert r.exit_code == 0, r.output
    argv = seen[0]
    assert argv[1] == "ui" and argv[argv.index("--port") + 1] == "5123"
    assert argv[argv.index("--backend-store-uri") + 1] == f"sqlite:///{tmp_path / 'rlvr' / 'mlflow.db'}"
    assert argv[argv.index("--default-artifact-root") + 1] == (tmp_path / "rlvr" / "mlartifacts").as_uri()
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    # nothing run yet: the UI still starts, on the experiments list
    assert r.stdout.strip().endswith("127.0.0.1:5123/#/experiments")



def test_airflow_home_per_sweep_process(monkeypatch, tmp_path):
    """Two sweeps at once on one store: each takes its own embedded Airflow DB (SQLite has one
    writer) while the stage cache and MLflow store stay shared."""
    from components.cli import airflow_env
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "store"))
    monkeypatch.delenv("RLVR_AIRFLOW_HOME", raising=False)
    assert airflow_env()["AIRFLOW_HOME"] == str((tmp_path / "store").resolve() / "airflow")
    monkeypatch.setenv("RLVR_AIRFLOW_HOME", str(tmp_path / "af2"))
    env = airflow_env()
    assert env["AIRFLOW_HOME"] == str((tmp_path / "af2").resolve())
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{(tmp_path / 'af2').resolve() / 'airflow.db'}"
    assert env["RLVR_HOME"] == str((tmp_path / "store").resolve())


def test_rerun_names_an_unknown_cell(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    monkeypatch.setenv(lineage.OVERRIDES_ENV, json.dumps(toy_stages.OVERRIDES))
    (tmp_path / "s.yaml").write_text(SWEEP)
    r = CliRunner().invoke(app, ["rerun", str(tmp_path / "s.yaml"), "train", "--cell", "tiny-nope-s0"])
    assert r.exit_code == 2 and "has no cell 'tiny-nope-s0' (cells: tiny-grpo-s0, tiny-vsr-s0)" in r.output, r.output
    r = CliRunner().invoke(app, ["rerun", str(tmp_path / "s.yaml"), "trian"])
    assert r.exit_code == 2 and "no stage 'trian'" in r.output, r.output


def test_tables_prints_pre_registered_claims_once(tmp_path, monkeypatch, capsys):
    """A pre-registered sweep's tables.md already ends with its claims.md: `rlvr tables` prints
    them once; a sweep without one gets claims.md appended."""
    import types

    from components import cli, tracking

    claims = "## Pre-registered claims on arith_levels (the judged set)\n\n| a | b |\n"
    out = tmp_path / "out"
    out.mkdir()
    run = types.SimpleNamespace(info=types.SimpleNamespace(run_id="r1"),
                                data=types.SimpleNamespace(tags={"rlvr.output_uri": str(out)}))
    monkeypatch.setattr(tracking, "latest_tables_run", lambda name: run)
    monkeypatch.setattr(cli.lineage, "client", lambda: None)
    (out / "claims.md").write_text(claims)
    for tables_md, count in (("## Accuracy\n\n| x |\n\n" + claims, 1), ("## Accuracy\n\n| x |\n", 1)):
        (out / "tables.md").write_text(tables_md)
        cli._print_tables("study")
        printed = capsys.readouterr().out
        assert printed.count("Pre-registered claims on arith_levels") == count and "## Accuracy" in printed


def test_footer_lines_stay_whole_on_a_narrow_terminal(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from components.cli import _footer
    home = tmp_path / ("a-long-store-path-" * 4) / "home"
    monkeypatch.setenv("RLVR_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = io.StringIO()
    _footer(Console(file=out, width=40))
    assert f"Browse runs:    RLVR_HOME={home} rlvr ui   (http://127.0.0.1:5000)" in out.getvalue().splitlines()
