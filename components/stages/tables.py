"""tables: the sweep's results as Markdown + CSV, and the plots (PNG, logged to MLflow).

Inputs: ``eval_*`` (evaluate outputs), ``run_*`` (train outputs, for the curves) and
``tokens`` (the tokens stage).
"""
from __future__ import annotations

from components.stages.base import StageContext, StageParams

NAME = "tables"
VERSION = 1
INPUTS = ("eval_*", "run_*", "tokens")


class Params(StageParams):
    title: str = "held-out hard subset"


def run(params: Params, ctx: StageContext) -> dict:
    import json

    import pandas as pd

    from analysis.plots import accuracy_bars, training_curves
    from analysis.tables import accuracy_table, to_markdown
    from components.stages.common import read_json

    results, runs, tokens = [], [], None
    for name, d in sorted(ctx.inputs.items()):
        if (d / "results.json").is_file():
            results.append(read_json(d / "results.json"))
        elif (d / "summary.json").is_file() and (d / "metrics.jsonl").is_file():
            hist = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines() if line]
            runs.append((read_json(d / "summary.json"), hist))
        elif (d / "tokens.csv").is_file():
            tokens = pd.read_csv(d / "tokens.csv")
    if not results:
        raise ValueError(f"tables: no evaluate outputs among the inputs ({sorted(ctx.inputs)})")
    df = accuracy_table(results, tokens)
    md = to_markdown(df, f"Accuracy and token cost: {params.title}")
    if tokens is not None:
        md += "\n" + to_markdown(tokens, "Tokens at matched update counts")
    (ctx.out_dir / "tables.md").write_text(md)
    df.to_csv(ctx.out_dir / "tables.csv", index=False)
    plots = [accuracy_bars(df, ctx.out_dir / "accuracy.png")]
    if runs:
        plots.append(training_curves(runs, ctx.out_dir / "curves.png"))
    return {"rows": df.to_dict("records"), "plots": [p.name for p in plots]}
