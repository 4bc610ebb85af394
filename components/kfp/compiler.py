"""A sweep file compiled to a Kubeflow Pipelines v2 pipeline (IR YAML). kfp venv only.

The pipeline is emitted from the stage graph (``components/stage_graph.py``), as the
Airflow DAG is: its stages in order, each planned from the upstream results it needs:

    exit handler "sweep" (end-sweep closes the MLflow parent run, FINISHED or FAILED)
      start-sweep                      snapshot of the sweep (+ the run's seeds / methods)
      for each stage, in order:
        plan-<stage>                   its calls, from the snapshot and the upstream results
        ParallelFor(calls): <stage>    rlvr run-stage <stage> --params P --inputs I --sweep S
                                         --parent-run-id R --extra E --xcom-file <output>
        (prepare_data, tokens, tables: one call, no loop)

Every step is a container. Stage steps run in the trainer image (filter_hard, train,
evaluate) or the pipeline image (the rest), the pipeline's own steps in the pipeline image;
pods are built from the manifests (``platform.py``). A stage's result is its ``rlvr
run-stage`` JSON (URI, digest, run id, cache key, the cell), handed on as a KFP output
parameter as the Airflow pods hand it back over XCom; the artifacts themselves stay on the
``rlvr-artifacts`` claim. The result is a STRING parameter holding the JSON text, not a
STRUCT: a protobuf Struct turns every integer into a double and kfp.local 2.17.3 cannot
hold a null in one (a stage summary has both); the plan steps parse it.

KFP's own execution cache is off on every task: the project's content-addressed cache
(stage code version + params + input digests, verified on disk) decides what is recomputed.
KFP's key is the task's inputs and component spec only: it would skip a stage whose code
changed in a rebuilt image of the same tag, hand back a URI whose artifact was deleted or
tampered with, and reuse start-sweep's parent run id from an earlier pipeline run. A cached
``rlvr run-stage`` costs seconds and leaves the MLflow lineage right.
"""
# no `from __future__ import annotations`: kfp reads the component signatures' annotations as objects
import inspect
import json
import re
from pathlib import Path
from typing import Optional

from kfp import compiler as kfp_compiler
from kfp import dsl

from components import stage_graph
from components.k8s.settings import GPU_STAGES
from components.kfp import platform
from components.sweep import Sweep, load_sweep

STEPS_MODULE = "components.kfp.steps"


def pipeline_name(sweep: str) -> str:
    """KFP pipeline names are lowercase DNS-like: 'rlvr-' + the sweep name."""
    return "rlvr-" + (re.sub(r"[^a-z0-9-]+", "-", sweep.lower()).strip("-") or "sweep")


def _named(fn, name: str):
    fn.__name__ = name  # the component's name in the IR (comp-<name>)
    return dsl.container_component(fn)


def _components(cfg: Sweep) -> dict:
    """The container components of this sweep: the pipeline's own steps and one per stage."""
    steps_image = platform.pipeline_image()
    py = ["python", "-m", STEPS_MODULE]

    def start_sweep(sweep: str, seeds: list, methods: list, run: str,
                    parent: dsl.OutputPath(str), snapshot: dsl.OutputPath(str)):
        return dsl.ContainerSpec(image=steps_image, command=py, args=[
            "start-sweep", "--sweep", sweep, "--seeds", seeds, "--methods", methods, "--run", run,
            "--parent-out", parent, "--sweep-out", snapshot])

    def end_sweep(sweep_name: str, run: str, status: dsl.PipelineTaskFinalStatus):
        return dsl.ContainerSpec(image=steps_image, command=py, args=[
            "end-sweep", "--sweep-name", sweep_name, "--run", run, "--status", status])

    def plan_calls(stage: str, sweep: str, parent: str, calls: dsl.OutputPath(list), **up):
        return dsl.ContainerSpec(image=steps_image, command=py, args=[
            "plan", stage, "--sweep", sweep, "--parent", parent, *_up_args(up), "--calls-out", calls])

    def plan_call(stage: str, sweep: str, params: dsl.OutputPath(str), inputs: dsl.OutputPath(str), **up):
        return dsl.ContainerSpec(image=steps_image, command=py, args=[
            "plan", stage, "--sweep", sweep, *_up_args(up), "--params-out", params, "--inputs-out", inputs])

    out = {"start_sweep": _named(start_sweep, "start_sweep"), "end_sweep": _named(end_sweep, "end_sweep"),
           "plan_calls": _planner(plan_calls, one=False), "plan_call": _planner(plan_call, one=True)}
    for st in stage_graph.STAGES:
        out[st.name] = _stage_component(cfg, st.name)
    return out


def _up_args(up: dict) -> list:
    # an upstream result only for the stages that read it (their needs in the stage graph)
    return [dsl.IfPresentPlaceholder(input_name=k, then=[f"--{k}", v]) for k, v in up.items()]


def _planner(fn, one: bool):
    """``fn`` as a container component taking, beside its own arguments, each result of the
    stage graph that a stage it plans needs (a one-call stage when ``one``, else a mapped
    one) as an optional input: the JSON text of one result, or the list of a fan-in."""
    own = [p for p in inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD]
    needed = {k for s in stage_graph.STAGES if (s.fan == "one") == one for k in s.needs}
    up = [inspect.Parameter(s.result, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                            annotation=Optional[str] if s.fan == "one" else Optional[list])
          for s in stage_graph.STAGES if s.result in needed]
    names = [p.name for p in own + up]

    def component(*args):
        given = dict(zip(names, args))
        return fn(*(given[p.name] for p in own), **{p.name: given[p.name] for p in up})

    component.__signature__ = inspect.Signature(own + up)
    return _named(component, fn.__name__)


def _stage_component(cfg: Sweep, stage: str):
    image = platform.pod_plan(cfg.kubernetes, cfg.name, stage, stage in GPU_STAGES)["image"]
    head = ["run-stage", stage]
    if stage_graph.BY_NAME[stage].fan == "one":
        def run(params: str, inputs: str, parent: str, result: dsl.OutputPath(str)):
            return dsl.ContainerSpec(image=image, command=["rlvr"], args=[
                *head, "--params", params, "--inputs", inputs, "--sweep", cfg.name, "--parent-run-id", parent,
                "--xcom-file", result])
    else:
        def run(params: str, inputs: str, extra: str, parent: str, result: dsl.OutputPath(str)):
            return dsl.ContainerSpec(image=image, command=["rlvr"], args=[
                *head, "--params", params, "--inputs", inputs, "--sweep", cfg.name, "--parent-run-id", parent,
                "--extra", extra, "--xcom-file", result])
    return _named(run, stage)


def build(cfg: Sweep):
    """The @dsl.pipeline function of one sweep."""
    comps = _components(cfg)
    sweep_json = json.dumps(cfg.model_dump(mode="json"), sort_keys=True)
    plans = {st.name: platform.pod_plan(cfg.kubernetes, cfg.name, st.name, st.name in GPU_STAGES)
             for st in stage_graph.STAGES}
    own = platform.pod_plan(cfg.kubernetes, cfg.name, None, False)

    def step(task, plan: dict, name: str):
        task.set_display_name(name).set_caching_options(False)
        task.set_retry(num_retries=cfg.retries, backoff_duration=f"{cfg.retry_delay_s:g}s", backoff_factor=1.0)
        return platform.apply(task, plan)

    @dsl.pipeline(name=pipeline_name(cfg.name), description=(cfg.description or f"RLVR sweep {cfg.name}")[:1000])
    def sweep_pipeline(seeds: list = list(cfg.seeds), methods: list = list(cfg.methods)):
        end = step(comps["end_sweep"](sweep_name=cfg.name, run=dsl.PIPELINE_JOB_ID_PLACEHOLDER), own, "end-sweep")
        with dsl.ExitHandler(end, name="sweep"):
            start = step(comps["start_sweep"](sweep=sweep_json, seeds=seeds, methods=methods,
                                              run=dsl.PIPELINE_JOB_ID_PLACEHOLDER), own, "start-sweep")
            parent, snap = start.outputs["parent"], start.outputs["snapshot"]
            results: dict = {}
            for st in stage_graph.STAGES:
                stage = st.name
                # a fresh Collected per consumer: the compiler rewrites the one it is given
                up = {k: dsl.Collected(results[k][1]) if results[k][0] else results[k][1] for k in st.needs}
                if st.fan == "one":
                    pl = step(comps["plan_call"](stage=stage, sweep=snap, **up), own, f"plan-{stage}")
                    run = step(comps[stage](params=pl.outputs["params"], inputs=pl.outputs["inputs"], parent=parent),
                               plans[stage], stage)
                    res = (False, run.outputs["result"])
                else:
                    # each call item carries the parent run id too: a loop body reads only its
                    # item (kfp.local even replaces every other task output a loop task takes by it)
                    pl = step(comps["plan_calls"](stage=stage, sweep=snap, parent=parent, **up), own, f"plan-{stage}")
                    with dsl.ParallelFor(pl.outputs["calls"]) as c:
                        run = step(comps[stage](params=c.params, inputs=c.inputs, extra=c.extra, parent=c.parent),
                                   plans[stage], stage)
                    res = (True, run.outputs["result"])  # fan-in: the list of every cell's result
                results[st.result] = res

    return sweep_pipeline


def compile_sweep(sweep_file: str | Path, out: str | Path) -> dict:
    """Compile one sweep file; returns a short summary (what ``rlvr compile`` prints)."""
    cfg = load_sweep(sweep_file)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.yaml")  # kfp wants the .yaml suffix
    try:
        kfp_compiler.Compiler().compile(build(cfg), str(tmp))
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return {"sweep": cfg.name, "pipeline": pipeline_name(cfg.name), "file": str(out),
            "grid": len(cfg.grid()), "eval_cells": len(cfg.eval_cells()), "executor": cfg.executor}
