"""``python -m components.trainer.verl --params JSON --inputs JSON --out DIR``

One verl training run outside the lineage cache (what a KubeRay RayJob or a GPU smoke test
runs). ``--params`` are the ``train`` stage's params (``backend`` is forced to ``verl``),
``--inputs`` maps ``model``/``hard``/``prefixes`` to artifact directories; JSON text or
``@file``. Checkpoints go to ``--work`` (default ``DIR/../<name>.work``) so a rerun resumes.
Metrics go to ``$MLFLOW_RUN_ID`` when set (verl's MLflow logger), else to a new run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _json_arg(text: str, what: str) -> dict:
    raw = Path(text[1:]).read_text() if text.startswith("@") else text
    try:
        val = json.loads(raw)
    except json.JSONDecodeError as e:
        raise SystemExit(f"--{what}: not JSON ({e.msg} at line {e.lineno} column {e.colno})")
    if not isinstance(val, dict):
        raise SystemExit(f"--{what}: expected a JSON object, got {type(val).__name__}")
    return val


def parse(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(prog="python -m components.trainer.verl", description=__doc__.split("\n\n")[1])
    ap.add_argument("--params", required=True, help="train params (JSON or @file)")
    ap.add_argument("--inputs", required=True, help='{"model": DIR, "hard": DIR, "prefixes": DIR} (JSON or @file)')
    ap.add_argument("--out", required=True, type=Path, help="output directory (model/, metrics.jsonl, ...)")
    ap.add_argument("--work", type=Path, default=None, help="checkpoint directory (resume)")
    ap.add_argument("--sweep", default="rlvr", help="MLflow experiment / verl project name")
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                    help="verl Hydra overrides, applied last (e.g. trainer.nnodes=2 trainer.n_gpus_per_node=8)")
    args = ap.parse_args(argv)
    bad = [o for o in args.overrides if "=" not in o or o.startswith("=")]
    if bad:
        raise SystemExit(f"overrides: {bad[0]!r} is not KEY=VALUE")

    from pydantic import ValidationError

    from components.stages.base import NullTracker, StageContext
    from components.stages.train import INPUTS, Params

    params = _json_arg(args.params, "params")
    inputs = _json_arg(args.inputs, "inputs")
    try:
        extra = list(params.get("verl_overrides") or []) + list(args.overrides)
        p = Params(**{**params, "backend": "verl", **({"verl_overrides": extra} if extra else {})})
    except ValidationError as e:
        err = e.errors()[0]
        raise SystemExit(f"--params: {'.'.join(str(x) for x in err['loc'])}: {err['msg']}")
    missing = [k for k in INPUTS if k not in inputs]
    if missing:
        raise SystemExit(f"--inputs: missing {', '.join(missing)} (need {', '.join(INPUTS)})")
    for k, v in inputs.items():
        if not Path(v).is_dir():
            raise SystemExit(f"--inputs: {k}: {v} is not a directory")
    out = args.out.resolve()
    work = (args.work or out.parent / f"{out.name}.work").resolve()
    work.mkdir(parents=True, exist_ok=True)
    ctx = StageContext(out_dir=out, work_dir=work, inputs={k: Path(v).resolve() for k, v in inputs.items()},
                       tracker=NullTracker(), sweep=args.sweep)
    return p, ctx


def main(argv: list[str] | None = None) -> int:
    import os

    p, ctx = parse(argv)
    ctx.tracker.run_id = os.environ.get("MLFLOW_RUN_ID", "")
    from components.trainer.verl.run import train_with_verl

    summary = train_with_verl(p, ctx)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
