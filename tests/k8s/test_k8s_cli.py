"""`rlvr run-stage ... --xcom-file F` (what a GPU stage pod runs): F holds exactly the JSON
printed on stdout, is written atomically, and nothing is written when the stage fails.
Toy stages (tests/support/toy_stages.py) through the real lineage cache and MLflow on SQLite."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import toy_stages
from components import lineage
from components.cli import app
from components.job_cli import RESULT_KEYS
from components.k8s.stage_pods import XCOM_FILE, run_stage_args


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "rlvr"
    monkeypatch.setenv("RLVR_HOME", str(home))
    monkeypatch.setenv(lineage.OVERRIDES_ENV, json.dumps(toy_stages.OVERRIDES))
    monkeypatch.setenv("TOY_CALLS", str(tmp_path / "calls.txt"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("TOY_FAIL", raising=False)
    toy_stages.premigrated_mlflow_db(home)
    return home


def _calls(home: Path) -> list[str]:
    f = home.parent / "calls.txt"
    return f.read_text().split() if f.exists() else []


def test_xcom_file_holds_exactly_the_printed_json(home, tmp_path):
    xcom = tmp_path / "airflow" / "xcom" / "return.json"  # parent dirs are created
    r = CliRunner().invoke(app, ["run-stage", "prepare_data", "--params", '{"n": 3}', "--sweep", "k8s",
                                 "--xcom-file", str(xcom)])
    assert r.exit_code == 0, r.output
    assert xcom.read_text() == r.stdout
    res = json.loads(xcom.read_text())
    assert set(res) == set(RESULT_KEYS) and res["stage"] == "prepare_data" and not res["cached"]
    assert Path(res["uri"]).is_dir() and lineage.verify_manifest(res["uri"])
    assert sorted(p.name for p in xcom.parent.iterdir()) == ["return.json"]  # no temp file left
    assert xcom.stat().st_mode & 0o044 == 0o044  # readable by a sidecar running as another uid

    # the same stage again: a cache hit, and the file is replaced by the new result
    again = CliRunner().invoke(app, ["run-stage", "prepare_data", "--params", '{"n": 3}', "--sweep", "k8s",
                                     "--xcom-file", str(xcom)])
    assert again.exit_code == 0 and xcom.read_text() == again.stdout
    assert json.loads(again.stdout)["cached"] is True and _calls(home) == ["prepare_data"]


def test_a_pod_argument_list_runs_as_is(home, tmp_path):
    """The argument list the DAG gives a pod (components.k8s.stage_pods), template-safe JSON and
    all, parsed by the real CLI; --extra labels the result with the pod's cell."""
    first = json.loads(CliRunner().invoke(app, ["run-stage", "prepare_data", "--sweep", "k8s"]).stdout)
    args = run_stage_args("pretrain", {"model": "{{ not a template }}"}, {"data": first["uri"]}, sweep="k8s",
                          parent=None, extra={"model": "Qwen/Qwen2.5-7B", "key": "{% x %}"})
    assert "{{" not in " ".join(args) and args[-2:] == ["--xcom-file", XCOM_FILE]
    xcom = tmp_path / "return.json"
    r = CliRunner().invoke(app, args[:-1] + [str(xcom)])
    assert r.exit_code == 0, r.output
    res = json.loads(xcom.read_text())
    assert xcom.read_text() == r.stdout
    assert res["model"] == "Qwen/Qwen2.5-7B" and res["key"] == "{% x %}" and res["stage"] == "pretrain"
    out = json.loads((Path(res["uri"]) / "out.json").read_text())
    assert out["params"]["model"] == "{{ not a template }}"  # the stage saw the text itself


def test_no_xcom_file_when_the_stage_fails(home, tmp_path, monkeypatch):
    xcom = tmp_path / "return.json"
    bad = CliRunner().invoke(app, ["run-stage", "filter_hard", "--params", '{"k": "x"}', "--xcom-file", str(xcom)])
    assert bad.exit_code == 2 and "params.k" in bad.stderr and not xcom.exists()
    monkeypatch.setenv("TOY_FAIL", "prepare_data")
    crash = CliRunner().invoke(app, ["run-stage", "prepare_data", "--xcom-file", str(xcom)])
    assert crash.exit_code != 0 and isinstance(crash.exception, RuntimeError) and not xcom.exists()


def test_extra_cannot_overwrite_the_result(home, tmp_path):
    xcom = tmp_path / "return.json"
    r = CliRunner().invoke(app, ["run-stage", "prepare_data", "--extra", '{"uri": "/elsewhere"}',
                                 "--xcom-file", str(xcom)])
    assert r.exit_code == 2 and r.stderr == "--extra: key 'uri' would overwrite the stage result\n"
    assert not xcom.exists() and _calls(home) == []  # refused before the stage ran
    r = CliRunner().invoke(app, ["run-stage", "prepare_data", "--extra", "[1]"])
    assert r.exit_code == 2 and r.stderr == "--extra: expected a JSON object\n"


def test_unwritable_xcom_file_is_one_line(home, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    r = CliRunner().invoke(app, ["run-stage", "prepare_data", "--xcom-file", str(blocker / "return.json")])
    assert r.exit_code == 1 and r.stderr.startswith(f"--xcom-file: {blocker / 'return.json'}: ")
    assert r.stderr.count("\n") == 1
