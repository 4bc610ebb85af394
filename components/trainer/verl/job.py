"""``rlvr train-verl``: one verl training run outside the lineage cache (what a KubeRay
RayJob or a GPU smoke test runs); ``components.cli`` parses the command line, this module
checks it and builds the run's params and context.

``params`` are the ``train`` stage's params (``backend`` is forced to ``verl``); ``inputs``
maps ``model``/``hard``/``prefixes`` to artifact directories. Checkpoints go to ``work``
(default ``OUT/../<name>.work``) so that a rerun resumes. Trailing ``KEY=VALUE`` words are
verl Hydra overrides, applied after the params' own ``verl_overrides``.
"""
from __future__ import annotations

from pathlib import Path


class JobError(ValueError):
    """A bad argument of ``rlvr train-verl``; ``str`` is one line naming the argument."""


def verl_job(params: dict, inputs: dict, out: Path, work: Path | None = None, sweep: str = "rlvr",
             overrides: list[str] | tuple[str, ...] = ()):
    """(validated train params, StageContext) of one verl run; JobError when an argument is bad."""
    from pydantic import ValidationError

    from components.error_text import validation_problem
    from components.stages.base import NullTracker, StageContext
    from components.stages.train import INPUTS, Params

    bad = [o for o in overrides if "=" not in o or o.startswith("=")]
    if bad:
        raise JobError(f"overrides: {bad[0]!r} is not KEY=VALUE")
    try:
        extra = list(params.get("verl_overrides") or []) + list(overrides)
        p = Params(**{**params, "backend": "verl", **({"verl_overrides": extra} if extra else {})})
    except ValidationError as e:
        field, problem = validation_problem(e, unknown="unknown parameter")
        raise JobError(f"--params: {field}: {problem}") from None
    # a trailing "*" marks an optional input (train's teacher)
    required = [k for k in INPUTS if not k.endswith("*")]
    missing = [k for k in required if k not in inputs]
    if missing:
        raise JobError(f"--inputs: missing {', '.join(missing)} (need {', '.join(required)})")
    for k, v in inputs.items():
        if not Path(v).is_dir():
            raise JobError(f"--inputs: {k}: {v} is not a directory")
    out = Path(out).resolve()
    work = (Path(work) if work else out.parent / f"{out.name}.work").resolve()
    work.mkdir(parents=True, exist_ok=True)
    ctx = StageContext(out_dir=out, work_dir=work, inputs={k: Path(v).resolve() for k, v in inputs.items()},
                       tracker=NullTracker(), sweep=sweep)
    return p, ctx
