"""The Kubeflow pipeline is the stage graph emitted (components/stage_graph.py), for every
sweep in dags/sweeps:

- the compiled IR has, per stage of the graph, a plan step ``plan-<stage>`` and the stage
  step, and each plan step takes exactly the upstream results the graph says the stage
  needs, each from the step (or the fan-in of the loop) of the stage that produces it;
- the compiled pipeline run through kfp.local (components/kfp/local.py --dry-run: the
  plan steps run for real, the stage steps record their arguments) makes exactly the
  graph's calls, and each stage step's ``rlvr run-stage`` arguments are those the
  Kubernetes pods get for the same call. Results are placeholders whose URI is a hash of
  the call, so a call that differs anywhere also changes every input downstream of it.
"""
import json

import pytest
import yaml
from kfp_testlib import SWEEPS, compiled

from components import stage_graph
from components.k8s.stage_pods import run_stage_args
from components.sweep import load_sweep

OWN = {"stage", "sweep", "parent"}   # a plan step's inputs that are not upstream results


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


def by_stage(calls: list[dict]) -> dict[str, list]:
    out: dict[str, list] = {}
    for c in json.loads(json.dumps(calls)):   # as the steps pass them (YAML int keys as text)
        out.setdefault(c["stage"], []).append((c["params"], c["inputs"], c["extra"]))
    return {k: sorted(v, key=lambda x: json.dumps(x, sort_keys=True)) for k, v in out.items()}  # any order: ParallelFor


def unrun(args: list[str]) -> list[str]:
    """An argument list without what differs by design: the parent run id (a placeholder on
    each side) and where the result goes (a KFP output file, a pod's XCom sidecar file)."""
    out = list(args)
    for flag in ("--parent-run-id", "--xcom-file"):
        if flag in out:
            out[out.index(flag) + 1] = "<" + flag + ">"
    return out


def plan_inputs(spec: dict) -> dict[str, dict[str, str]]:
    """plan-<stage> display name -> {upstream input: display name of the stage step feeding it}."""
    comps = {k.removeprefix("comp-"): c.get("dag", {}).get("tasks", {}) for k, c in spec["components"].items()}
    tasks = dict(spec["root"]["dag"]["tasks"])
    for inner in comps.values():
        tasks.update(inner)

    def stage_of(key: str) -> str:   # a loop's fan-in is the result of the one stage step inside it
        if key.startswith("for-loop-"):
            [inner] = comps[key].values()
            return inner["taskInfo"]["name"]
        return tasks[key]["taskInfo"]["name"]

    return {t["taskInfo"]["name"]: {n: stage_of(v["taskOutputParameter"]["producerTask"])
                                    for n, v in t["inputs"]["parameters"].items() if n not in OWN}
            for t in tasks.values() if t["taskInfo"]["name"].startswith("plan-")}


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.stem)
def test_the_pipeline_is_the_graph_emitted(sweep, kfp_report):
    cfg = load_sweep(sweep)
    kfp, ir = compiled(kfp_report, sweep)
    assert kfp["dry"]["ok"], kfp["dry"]["error"]

    spec = next(yaml.safe_load_all(ir.read_text()))
    assert plan_inputs(spec) == {f"plan-{s.name}": {k: stage_graph.PRODUCER[k] for k in s.needs}
                                 for s in stage_graph.STAGES}

    ours = kfp_calls(kfp["dry"]["steps"])
    want, _ = stage_graph.walk(cfg, stage_graph.dry_result)
    assert by_stage(ours) == by_stage(want)
    for c in ours:
        pod = run_stage_args(c["stage"], c["params"], c["inputs"], sweep=cfg.name, parent="p", extra=c["extra"] or None)
        assert unrun(c["args"]) == unrun(pod), c["stage"]
