"""analysis/method_metrics.py: per-run means of a method's own numbers from train artifacts."""
from __future__ import annotations

import json
import math

import pytest

from analysis.method_metrics import main, step_means


def _run(train, key, method, seed, rows, finished=True):
    d = train / key
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"method": method, "seed": seed}))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if finished:
        (d / "manifest.json").write_text("{}")


def test_step_means_averages_method_keys_and_skips_unfinished(tmp_path):
    train = tmp_path / "artifacts" / "train"
    _run(train, "a" * 16, "rail", 0, [
        {"step": 0, "groups/mixed_frac": 0.5, "method/live": 0, "method/arm": 1.0},
        {"step": 1, "groups/mixed_frac": 0.25, "method/live": 1, "method/arm": 3.0},
        {"step": 2, "groups/mixed_frac": 0.75, "method/live": 1, "method/arm": 2.0}])
    _run(train, "b" * 16, "grpo", 0, [{"step": 0, "groups/mixed_frac": 1.0}])
    _run(train, "c" * 16, "rail", 1, [{"step": 0, "groups/mixed_frac": 0.0}], finished=False)
    rows = step_means(train)
    assert [(r["method"], r["seed"], r["steps"]) for r in rows] == [("rail", 0, 3), ("grpo", 0, 1)]
    assert rows[0]["arm"] == pytest.approx(2.0) and rows[0]["mixed_frac"] == pytest.approx(0.5)
    live = step_means(train, methods=["rail"], live_only=True)
    assert len(live) == 1 and live[0]["arm"] == pytest.approx(2.5) and live[0]["steps"] == 2
    assert math.isclose(live[0]["live"], 1.0)


def test_no_finished_run_is_one_line_naming_the_directory(tmp_path, monkeypatch, capsys):
    with pytest.raises(LookupError, match="no finished training run"):
        step_means(tmp_path / "artifacts" / "train")
    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    assert main(["steps"]) == 2
    assert str(tmp_path / "artifacts" / "train") in capsys.readouterr().err
