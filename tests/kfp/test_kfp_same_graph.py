"""One stage graph, two orchestrators: for every sweep in dags/sweeps the compiled KFP pipeline
makes exactly the stage calls the Airflow DAG makes -- same stages, same grid and eval cells,
same params and inputs, and for the GPU pods of kubernetes sweeps the same `rlvr run-stage`
argument lists.

Both sides run for real up to the stage itself: the Airflow tasks' own callables (stage calls
recorded, tests/kfp/airflow_calls.py) and the compiled pipeline's plan steps through kfp.local
(stage steps record their arguments, components/kfp/local.py --dry-run). Each stage result
is a placeholder whose URI is a hash of the call, so a call that differs anywhere also changes
every URI downstream of it.
"""
import json

import pytest
from kfp_testlib import SWEEPS

from components.k8s.stage_pods import run_stage_args
from components.sweep import load_sweep

GPU = ("filter_hard", "train", "evaluate")
PER_MODEL = ("pretrain", "filter_hard", "seed_prefixes")


def _opt(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def kfp_calls(steps: list[dict]) -> list[dict]:
    out = []
    for s in steps:
        c = s["cmd"]
        if c[:2] == ["rlvr", "run-stage"]:
            assert s["rc"] == 0, s
            out.append({"stage": c[2], "params": json.loads(_opt(c, "--params")),
                        "inputs": json.loads(_opt(c, "--inputs")), "extra": json.loads(_opt(c, "--extra") or "{}"),
                        "args": c[1:]})
    return out


def key(c: dict) -> tuple:
    return c["stage"], json.dumps(c["params"], sort_keys=True), json.dumps(c["inputs"], sort_keys=True)


def unrun(args: list[str]) -> list[str]:
    """An argument list without what differs by design: the parent run id (a placeholder on
    each side) and where the result goes (Airflow's XCom sidecar file, a KFP output file)."""
    out = list(args)
    for flag in ("--parent-run-id", "--xcom-file"):
        if flag in out:
            out[out.index(flag) + 1] = "<" + flag + ">"
    return out


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.stem)
def test_same_calls_as_the_airflow_dag(sweep, kfp_report, airflow_report):
    cfg = load_sweep(sweep)
    kfp = kfp_report[1][str(sweep)]
    assert "error" not in kfp, kfp.get("error")
    assert kfp["dry"]["ok"], kfp["dry"]["error"]
    af = airflow_report["dags"][f"rlvr_{cfg.name}"]
    ours, theirs = kfp_calls(kfp["dry"]["steps"]), af["calls"]

    # the same calls, each once
    assert sorted(map(key, ours)) == sorted(map(key, theirs))
    assert len(set(map(key, ours))) == len(ours)

    # the cells: one call per model, per grid cell, per eval cell, one for the rest
    by_stage = {s: [c for c in ours if c["stage"] == s] for s in {c["stage"] for c in ours}}
    for s in PER_MODEL:   # teacher-only models are pretrained, never filtered
        want = cfg.pretrained_models() if s == "pretrain" else cfg.models
        assert sorted(c["extra"]["model"] for c in by_stage[s]) == sorted(want)
    grid = sorted(cfg.grid(), key=lambda g: g["key"])
    assert sorted((c["extra"] for c in by_stage["train"]), key=lambda g: g["key"]) == grid  # each labelled with its cell
    assert sorted(c["extra"]["label"] for c in by_stage["evaluate"]) == sorted(e["label"] for e in cfg.eval_cells())
    assert all(len(by_stage[s]) == 1 for s in ("prepare_data", "tokens", "tables"))

    # every stage step's arguments are what the Airflow pod builder makes of the call
    for c in ours:
        want = run_stage_args(c["stage"], c["params"], c["inputs"], sweep=cfg.name, parent="p",
                              extra=c["extra"] or None)
        assert unrun(c["args"]) == unrun(want), c["stage"]

    # kubernetes sweeps: the GPU pods' argument lists of the Airflow DAG, one for one
    if cfg.executor == "kubernetes":
        assert af["executor"] == "kubernetes" and af["pods"]
        assert sorted(unrun(c["args"]) for c in ours if c["stage"] in GPU) == \
            sorted(unrun(p["arguments"]) for p in af["pods"])
    else:
        assert af["executor"] == "local" and not af["pods"]


def test_a_different_call_is_seen(kfp_report, airflow_report):
    """The comparison can fail: one changed param in one Airflow call breaks the match."""
    sweep = next(s for s in SWEEPS if s.stem == "demo")
    ours = kfp_calls(kfp_report[1][str(sweep)]["dry"]["steps"])
    theirs = [dict(c) for c in airflow_report["dags"]["rlvr_demo"]["calls"]]
    assert sorted(map(key, ours)) == sorted(map(key, theirs))
    theirs[-1] = {**theirs[-1], "params": {**theirs[-1]["params"], "title": "changed"}}
    assert sorted(map(key, ours)) != sorted(map(key, theirs))
