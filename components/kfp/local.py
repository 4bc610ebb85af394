"""Run a compiled pipeline on this machine with ``kfp.local`` (kfp venv; the steps themselves
run in the main environment, as they would in the images).

kfp.local's ``DockerRunner`` needs a Docker daemon and the project's images; its
``SubprocessRunner`` refuses container components (``validate_not_container_component``). So
kfp.local's own orchestrator does what it does for a real local run (reads the compiled
PipelineSpec, resolves every placeholder, runs the DAG with ParallelFor, the fan-in
``dsl.Collected`` and the exit handler, reads each step's output files), and the
SubprocessRunner's task handler is swapped for one that runs the container's command and args as
a local process, as kfp's own orchestrator tests do. What differs from a cluster: the image (the
main environment, found via ``--bin``), the platform config (one local RLVR_HOME; no ConfigMap or
Secrets) and KFP's bookkeeping (no ML Metadata).

kfp.local (2.17) looks a ParallelFor over a named output of another task (``plan-<stage>``'s
``calls``) up as a task output only when the output is called ``Output``, else as a missing
parent input ("Parent pipeline input argument 'pipelinechannel--plan-calls-calls' not found");
``_loop_items`` adds the lookup the IR states: the loop task's own input binding
(``taskOutputParameter``).

``dry_run``: only the plan steps run. Stage steps (``rlvr run-stage``) write a placeholder
result (``stage_graph.dry_result``) to their output file; start-sweep writes the run's sweep
snapshot (``steps.snapshot``, in this process) and a placeholder parent run id, without
MLflow; end-sweep does nothing. The tests use it to read the calls of paper-scale sweeps
that cannot run here; the real path of every step is what a run without ``dry_run`` takes.
"""
import builtins
import contextlib
import json
import os
import shutil
import threading
import time
from pathlib import Path
from unittest import mock

import yaml
from google.protobuf import json_format
from kfp import components, local
from kfp.local import io, logging_utils, status, subprocess_task_handler
from kfp.pipeline_spec import pipeline_spec_pb2

from components import stage_graph
from components.artifacts import write_atomic

REPO = Path(__file__).resolve().parents[2]


class _ProcessHandler(subprocess_task_handler.SubprocessTaskHandler):
    """A container step as a local process (see the module docstring)."""

    env: dict = {}
    dry_run = False
    log: Path | None = None
    lock = threading.Lock()

    # the image is named, not pulled; any command runs as a local process
    validate_image = validate_not_container_component = validate_not_containerized_python_component = \
        lambda self, _: None

    def run(self) -> status.Status:
        cmd = list(self.full_command)
        env = {**os.environ, **self.env_vars, **self.env}
        t0 = time.monotonic()
        dry = self.dry_run and _dry_kind(cmd)
        if dry:
            rc = DRY[dry](cmd)
        else:
            exe = shutil.which(cmd[0], path=env["PATH"])
            if exe is None:
                raise FileNotFoundError(f"{cmd[0]}: not on PATH {env['PATH']}")
            rc = subprocess_task_handler.run_local_subprocess([exe] + cmd[1:], env_vars=env)
        if self.log is not None:
            with self.lock, open(self.log, "a") as f:
                f.write(json.dumps({"cmd": cmd, "rc": rc, "s": round(time.monotonic() - t0, 2),
                                    "dry": bool(dry)}) + "\n")
        return status.Status.SUCCESS if rc == 0 else status.Status.FAILURE


def _opt(cmd: list[str], flag: str) -> str | None:
    return cmd[cmd.index(flag) + 1] if flag in cmd else None


DRY_PARENT = "dry-run-parent"


def _dry_kind(cmd: list[str]) -> str | None:
    if cmd[:2] == ["rlvr", "run-stage"]:
        return "stage"
    if cmd[:3] == ["python", "-m", "components.kfp.steps"] and cmd[3] in ("start-sweep", "end-sweep"):
        return cmd[3]
    return None


def _dry_start(cmd: list[str]) -> int:
    from components.kfp import steps
    snap = steps.snapshot(json.loads(_opt(cmd, "--sweep")), json.loads(_opt(cmd, "--seeds")),
                          json.loads(_opt(cmd, "--methods")), "kfp dry run")
    write_atomic(_opt(cmd, "--parent-out"), DRY_PARENT)
    write_atomic(_opt(cmd, "--sweep-out"), json.dumps(snap.model_dump(mode="json"), sort_keys=True))
    return 0


def _dry_stage(cmd: list[str]) -> int:
    c = stage_graph.call(cmd[2], "", json.loads(_opt(cmd, "--params")), json.loads(_opt(cmd, "--inputs")),
                         json.loads(_opt(cmd, "--extra") or "{}"))
    res = stage_graph.labelled(stage_graph.dry_result(c), c)
    write_atomic(_opt(cmd, "--xcom-file"), json.dumps(res, sort_keys=True) + "\n")
    return 0


def _loop_bindings(spec: pipeline_spec_pb2.PipelineSpec) -> dict[str, tuple[str, str]]:
    """ParallelFor items input name -> (producer task, output key), from the compiled IR."""
    out = {}
    dags = [spec.root.dag] + [c.dag for c in spec.components.values() if c.HasField("dag")]
    for d in dags:
        for t in d.tasks.values():
            if t.WhichOneof("iterator") != "parameter_iterator":
                continue
            name = t.parameter_iterator.items.input_parameter
            src = t.inputs.parameters[name] if name in t.inputs.parameters else None
            if src is not None and src.HasField("task_output_parameter"):
                out[name] = (src.task_output_parameter.producer_task, src.task_output_parameter.output_parameter_key)
    return out


def _loop_items(bindings: dict[str, tuple[str, str]]):
    original = io.IOStore.get_parent_input

    def get_parent_input(self, key):
        try:
            return original(self, key)
        except ValueError:
            if key not in bindings:
                raise
            return self.get_task_output(*bindings[key])
    return mock.patch.object(io.IOStore, "get_parent_input", get_parent_input)


DRY = {"stage": _dry_stage, "start-sweep": _dry_start, "end-sweep": lambda cmd: 0}


def run_local(file: str | Path, home: str | Path, bin_dir: str | None = None, dry_run: bool = False,
              log: str | None = None, arguments: dict | None = None) -> dict:
    """Run the compiled pipeline ``file`` to the end; RLVR_HOME=``home`` stands in for the
    artifacts claim. Returns every executed step and each stage call's result."""
    home = Path(home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(bin_dir or REPO / ".venv" / "bin").resolve()
    if not (bin_dir / "python").exists() or not (bin_dir / "rlvr").exists():
        raise FileNotFoundError(f"{bin_dir}: no python and rlvr of the main environment (make env)")
    log_path = Path(log).resolve() if log else home / "kfp-local-steps.jsonl"
    start = log_path.stat().st_size if log_path.exists() else 0
    env = {"RLVR_HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(REPO)}
    pipeline = components.load_component_from_file(str(file))
    spec = json_format.ParseDict(next(yaml.safe_load_all(Path(file).read_text())), pipeline_spec_pb2.PipelineSpec())
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(home / "kfp-local-root"),
               raise_on_error=True)
    t0 = time.monotonic()
    error = None
    _ProcessHandler.env, _ProcessHandler.dry_run, _ProcessHandler.log = env, dry_run, log_path
    # kfp.local indents a task's prints by swapping ``builtins.print`` for a wrapper and back; its
    # DAG orchestrator runs tasks on threads, so interleaved swaps leak wrappers that nest one level
    # deeper per task (a 200-task dry run spent minutes per task and wrote 900 MB of indentation).
    # Our steps print from their own processes: no indentation, and print restored at the end.
    # kfp's task dispatcher looks the handler class up on the module at each task.
    with mock.patch.object(logging_utils, "indented_print", lambda num_spaces=4: contextlib.nullcontext()), \
            mock.patch.object(builtins, "print", builtins.print), \
            mock.patch.object(subprocess_task_handler, "SubprocessTaskHandler", _ProcessHandler), \
            _loop_items(_loop_bindings(spec)):
        try:
            pipeline(**(arguments or {}))
        except Exception as e:  # noqa: BLE001 - a failed step or kfp.local itself: reported with the steps run
            error = " ".join(f"{type(e).__name__}: {e}".split())
    seconds = time.monotonic() - t0
    with open(log_path) as f:
        f.seek(start)
        steps = [json.loads(line) for line in f if line.strip()]
    stages: dict[str, list] = {}
    for s in steps:
        if s["cmd"][:2] == ["rlvr", "run-stage"] and s["rc"] == 0:
            stages.setdefault(s["cmd"][2], []).append(json.loads(Path(_opt(s["cmd"], "--xcom-file")).read_text()))
    return {"pipeline": pipeline.name, "ok": error is None and all(s["rc"] == 0 for s in steps), "error": error,
            "seconds": round(seconds, 1), "steps": steps, "stages": stages}
