"""tokens: generated and prompt tokens per method at matched update counts.

Inputs: every ``train`` output of the sweep (any input name; ``run_<model>-<method>-s<seed>``
names the model, and a sweep of several models gets a row per model and method). The update
count is the smallest ``steps`` among the runs unless ``updates`` is given; every run is cut there.
"""
from __future__ import annotations

from pydantic import Field

from components.stages.base import StageContext, StageParams

NAME = "tokens"
VERSION = 1
INPUTS = ("run_*",)     # any number of train outputs


class Params(StageParams):
    updates: int | None = Field(None, ge=1)


def run(params: Params, ctx: StageContext) -> dict:
    from analysis.tokens import per_method, run_tokens
    from analysis.paper import cell_model
    from components.stages.common import read_json

    runs = []
    for name, d in sorted(ctx.inputs.items()):
        if (d / "summary.json").is_file():
            summary = read_json(d / "summary.json")
            runs.append(({**summary, "model": cell_model(name, summary)}, read_json(d / "tokens.json")))
    if not runs:
        raise ValueError(f"tokens: no train outputs among the inputs ({sorted(ctx.inputs)})")
    updates = params.updates or min(s["steps"] for s, _ in runs)
    per_run = [run_tokens(s, rows, updates) for s, rows in runs]
    df = per_method(per_run)
    df.to_csv(ctx.out_dir / "tokens.csv", index=False)
    (ctx.out_dir / "tokens.md").write_text(df.to_markdown(index=False, floatfmt=".3g") + "\n")
    import json
    (ctx.out_dir / "per_run.json").write_text(json.dumps(per_run, indent=2))
    for r in df.to_dict("records"):
        who = f"{r['model']}/{r['method']}" if "model" in r else r["method"]
        ctx.tracker.log_metrics({f"tokens/{who}/generated": r["generated_tokens"],
                                 f"tokens/{who}/prompt": r["prompt_tokens"]})
    return {"updates": updates, "methods": df["method"].tolist()}
