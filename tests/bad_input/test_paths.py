"""Missing and unusable paths: a missing data file, a directory where a file is due, a
file that cannot be read, a model directory without a model, a missing or non-artifact
stage input, a missing sweep file. Each is a one-line error naming the path."""
from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from components import lineage
from components.cli import app
from components.data.loaders import load_math
from components.data.schema import DataError, read_problems
from components.stages.common import load_model, read_json


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_missing_data_file(tmp_path):
    for load in (read_problems, load_math):
        with pytest.raises(DataError) as e:
            load(tmp_path / "nope.jsonl")
        assert _one_line(e) == f"{tmp_path / 'nope.jsonl'}: no such data file"


def test_directory_instead_of_data_file(tmp_path):
    with pytest.raises(DataError, match="no such data file"):
        read_problems(tmp_path)


def test_unsupported_extension(tmp_path):
    f = tmp_path / "data.csv"
    f.write_text("a,b\n")
    with pytest.raises(DataError) as e:
        load_math(f)
    assert str(f) in _one_line(e) and "unsupported file type" in str(e.value)


def test_unreadable_file(tmp_path):
    """Tests run as root, which reads any mode; a self-referencing symlink is a path
    that cannot be read whoever you are (open() fails with ELOOP)."""
    f = tmp_path / "loop.jsonl"
    os.symlink(f, f)                                    # ELOOP on open: a real OS error
    with pytest.raises(DataError) as e:
        read_problems(f)
    assert str(f) in _one_line(e)


def test_model_dir_without_a_model(tmp_path):
    with pytest.raises(DataError) as e:
        load_model(tmp_path)
    assert _one_line(e) == f"{tmp_path}: no model here (config.json missing)"


def test_missing_json_input(tmp_path):
    with pytest.raises(DataError) as e:
        read_json(tmp_path / "traces.json")
    assert _one_line(e) == f"{tmp_path / 'traces.json'}: missing"


def test_run_stage_with_missing_and_unfinished_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    monkeypatch.setenv(lineage.OVERRIDES_ENV, '{"pretrain": "toy_stages:pretrain"}')
    half = tmp_path / "half"
    half.mkdir()
    (half / "out.json").write_text("{}")             # an artifact dir with no manifest
    runner = CliRunner()
    for uri, why in ((tmp_path / "gone", "no manifest.json"), (half, "no manifest.json")):
        r = runner.invoke(app, ["run-stage", "pretrain", "--inputs", f'{{"data": "{uri}"}}'])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1
        assert str(uri) in r.stderr and why in r.stderr and "input 'data'" in r.stderr
    r = runner.invoke(app, ["run-stage", "pretrain", "--params", "@" + str(tmp_path / "none.json")])
    assert r.exit_code == 2 and "--params" in r.stderr and "none.json" in r.stderr


def test_missing_sweep_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    f = tmp_path / "nope.yaml"
    r = CliRunner().invoke(app, ["sweep", str(f)])
    assert r.exit_code == 2 and r.stderr == f"{f}: <file>: No such file or directory\n"
    r = CliRunner().invoke(app, ["sweep", str(tmp_path)])
    assert r.exit_code == 2 and r.stderr.startswith(f"{tmp_path}: <file>: ")
