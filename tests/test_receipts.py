"""Sweep receipts (components/receipts.py): when may `rlvr sweep` skip Airflow? Only when
every stage call of the last successful run would be a verified cache hit today."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import toy_stages
from components import lineage, receipts
from components.cli import app


def task(stage: str, params: dict, inputs: dict) -> dict:
    """One stage task of a sweep, as the Kubernetes pods run it (``rlvr run-stage``); the local
    DAG's Python tasks record the same way (dags/rlvr_sweep.py, tests/test_cli.py)."""
    r = CliRunner().invoke(app, ["run-stage", stage, "--params", json.dumps(params), "--inputs", json.dumps(inputs),
                                 "--sweep", "s"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(receipts.RECEIPT_ENV, raising=False)
    toy_stages.premigrated_mlflow_db(tmp_path / "rlvr")
    saved = dict(lineage.STAGES)
    for n in toy_stages.ALL:
        lineage.register_stage(n, f"toy_stages:{n}")
    yield tmp_path / "rlvr"
    lineage.STAGES.clear()
    lineage.STAGES.update(saved)


def _sweep(home, monkeypatch, fp="fp"):
    """A three-stage chain run the way the DAG runs it, with a receipt being written."""
    tmp = receipts.begin(home, "s")
    monkeypatch.setenv(receipts.RECEIPT_ENV, str(tmp))
    data = task("prepare_data", {"n": 3}, {})
    model = task("pretrain", {}, {"data": data["uri"]})
    task("prepare_data", {"n": 3}, {})                                      # a repeated call: one entry
    monkeypatch.delenv(receipts.RECEIPT_ENV)
    return receipts.commit(home, "s", fp, tmp), data, model


def test_all_cached_then_each_reason_to_run_the_dag(home, monkeypatch):
    assert receipts.all_cached(home, "s", "fp")[:2] == (False, "no receipt of an earlier successful run")
    path, data, model = _sweep(home, monkeypatch)
    calls = json.loads(path.read_text())["calls"]
    assert [c["stage"] for c in calls] == ["prepare_data", "pretrain"]
    assert calls[1]["inputs"] == {"data": data["uri"]} and calls[1]["cache_key"] == model["cache_key"]
    assert receipts.all_cached(home, "s", "fp") == (True, "", 2)

    ok, why, _ = receipts.all_cached(home, "s", "other")                    # sweep or wiring changed
    assert not ok and "changed" in why

    class pretrain_v2(toy_stages.pretrain):                                  # stage code changed
        VERSION = 2
    toy_stages.pretrain_v2 = pretrain_v2
    lineage.register_stage("pretrain", "toy_stages:pretrain_v2")
    ok, why, _ = receipts.all_cached(home, "s", "fp")
    assert not ok and why == "pretrain: its cache key changed (stage code or defaults)"
    lineage.register_stage("pretrain", "toy_stages:pretrain")
    assert receipts.all_cached(home, "s", "fp")[0]

    out = next(p for p in (lineage._uri_path(model["uri"])).rglob("out.json"))
    out.write_text(out.read_text() + " ")                                    # an artifact tampered with
    ok, why, _ = receipts.all_cached(home, "s", "fp")
    assert not ok and why.startswith("pretrain: output") and "no longer a verified cache entry" in why


def test_fingerprint_covers_config_and_wiring(monkeypatch, tmp_path):
    a = receipts.fingerprint({"name": "x", "seeds": [0]})
    assert a == receipts.fingerprint({"seeds": [0], "name": "x"})            # key order does not matter
    assert a != receipts.fingerprint({"name": "x", "seeds": [1]})
    wiring = tmp_path / "rlvr_sweep.py"
    wiring.write_text("v1")
    monkeypatch.setattr(receipts, "WIRING", (wiring,))
    b = receipts.fingerprint({"name": "x"})
    wiring.write_text("v2")
    assert receipts.fingerprint({"name": "x"}) != b


def test_no_env_no_receipt(home, monkeypatch, tmp_path):
    task("prepare_data", {"n": 2}, {})
    assert not (home / "receipts").exists()
