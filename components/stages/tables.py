"""tables: the sweep's results as Markdown + CSV, and the plots (PNG, logged to MLflow).

Inputs: ``eval_*`` (evaluate outputs), ``run_*`` (train outputs, for the curves) and
``tokens`` (the tokens stage).

With ``paper: vsr|vigor|vip`` the benchmark results also go beside that paper's numbers
(``paper_vs_measured.{md,csv,tex}``, delta = measured - paper; ``analysis.paper``). With
validation histories it writes VIGOR's measure: accuracy vs cumulative rollouts with the
target line and rollouts-to-target per method (``rollouts_to_target.csv``, ``rollouts.png``),
and the generated tokens per update by method (``tokens_per_update.png``). Always: each paper
claim's verdict on this sweep (``claims.md`` / ``claims.csv``; ``analysis.claims``), and the
share of each method's evaluation samples graded ``no_answer``/``unparsable``/``timeout``/``error``
(``grading_reasons.csv``; from each evaluation's ``samples.jsonl``), so that a change in grading
shows in the results. With the sweep's ``preregistration``, claims.md (and the end of
tables.md) opens with the pre-registration and gives its claims' verdicts on its primary set,
then on each other evaluation set.

With ``analyses`` it also runs the papers' CPU-sized analyses on the sweep's artifacts
(``analysis.paper_analyses``): ``analyses.md`` (appended to tables.md), a plot each
(``analysis_<name>.png``) and ``paper_vs_measured_analyses.csv``. ``vsr_states`` samples from
the sweep's policies: its inputs add ``policy_<model>`` (the pretrain output), ``hard_<model>``
and ``hard_run_<key>`` (the hard subset each policy trained on; ``components/stage_graph.py``).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from components.stages.base import StageContext, StageParams

NAME = "tables"
VERSION = 5
INPUTS = ("eval_*", "run_*", "tokens", "policy_*", "hard_*")
ANALYSES = ("vsr_states", "invalid_rollouts", "vigor_selection", "vigor_speedup")
POLICY_ANALYSES = ("vsr_states",)   # these sample from the sweep's policies: they need their inputs


class VsrStatesSettings(StageParams):
    """analysis/vsr_states.py's sizes (the paper: 8 continuations per truncation, 16 per prefix)."""
    split: str = "train"
    max_problems: int | None = Field(32, ge=3)
    # D.5 needs problems with a mixed first group: it scans d5_scan problems (None: max_problems)
    # and keeps the first d5_mixed mixed ones (None: all of them)
    d5_scan: int | None = Field(None, ge=3)
    d5_mixed: int | None = Field(None, ge=3)
    n_curve: int = Field(8, ge=1)
    n_prefix: int = Field(16, ge=2)
    max_new_tokens: int = Field(128, ge=1)
    seed: int = 0


class SpeedupSettings(StageParams):
    """analysis/vigor_speedup.py's schedule (the paper's T=4, gamma=2, alpha=0.5) and simulation size."""
    T: int = Field(4, ge=1)
    gamma: float = Field(2.0, gt=1)
    alpha: float = Field(0.5, gt=0, lt=1)
    prompts: int = Field(20_000, ge=10)
    reps: int = Field(20, ge=2)
    seed: int = 0


class Params(StageParams):
    ADDED_FIELDS = ("preregistration", "analyses", "vsr_states", "vigor_speedup")
    title: str = "held-out hard subset"
    # vsr_agentic: the seed's agentic numbers (token accounting, BabyAI runs) beside this sweep's
    paper: Literal["vsr", "vigor", "vip", "vsr_agentic"] | None = None
    # VIGOR's rollouts-to-target: the target is ``rollouts_target`` if set, else
    # ``rollouts_fraction`` x the best validation accuracy of ``rollouts_baseline``
    rollouts_baseline: str = "grpo"
    rollouts_target: float | None = Field(None, ge=0, le=1)
    rollouts_fraction: float = Field(1.0, gt=0, le=1)
    # the method every other is compared with (paired difference with its interval)
    reference: str = "grpo"
    # validation points in the trailing mean before comparing with the target
    smooth_window: int = Field(3, ge=1)
    # the sweep's pre-registration (filled from the sweep file's block; components/preregistration.py):
    # printed beside the verdicts, its claims judged on its primary set, then on each other set
    preregistration: dict | None = None
    # the papers' analyses on this sweep's artifacts, in this order (analysis/paper_analyses.py)
    analyses: tuple[Literal[ANALYSES], ...] = ()
    vsr_states: VsrStatesSettings = VsrStatesSettings()
    vigor_speedup: SpeedupSettings = SpeedupSettings()


def run(params: Params, ctx: StageContext) -> dict:
    import json

    import pandas as pd

    from analysis.plots import accuracy_bars, training_curves
    from analysis.rollouts import tokens_per_update_plot
    from analysis.tables import accuracy_table, readable, to_markdown
    from components.stages.common import read_json

    results, runs, tokens, samples = [], [], None, []
    for name, d in sorted(ctx.inputs.items()):
        if name.startswith(("policy_", "hard_")):
            continue   # the analyses' policies and hard subsets (below)
        if (d / "results.json").is_file():
            results.append(read_json(d / "results.json"))
            if (d / "samples.jsonl").is_file():  # evaluations that grade no math answers write none
                samples.append((results[-1], d / "samples.jsonl"))
        elif (d / "summary.json").is_file() and (d / "metrics.jsonl").is_file():
            hist = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines() if line]
            runs.append((_with_model(name, read_json(d / "summary.json")), hist))
        elif (d / "tokens.csv").is_file():
            tokens = pd.read_csv(d / "tokens.csv")
    if not results:
        raise ValueError(f"tables: no evaluate outputs among the inputs ({sorted(ctx.inputs)})")
    df = accuracy_table(results, tokens, runs, params.reference)
    md = to_markdown(readable(df, params.reference), f"Accuracy and token cost: {params.title}")
    md += (f"\nmean@k: mean over training seeds; [95% CI]: hierarchical bootstrap over training seeds, then "
           f"problems; Δ vs {params.reference}: paired over the same seeds and problems. eval_clip / train_clip: "
           "share of responses cut off by the response budget at evaluation / in training rollouts.\n")
    if tokens is not None:
        md += "\n" + to_markdown(tokens, "Tokens at matched update counts")
    out: dict = {"rows": df.to_dict("records")}
    if samples:
        reasons = _grading_reasons(samples)
        reasons.to_csv(ctx.out_dir / "grading_reasons.csv", index=False)
        md += "\n" + to_markdown(reasons, "Grading reasons: share of evaluation samples")
        out["grading_reasons"] = reasons.to_dict("records")
    (ctx.out_dir / "tables.md").write_text(md)
    df.to_csv(ctx.out_dir / "tables.csv", index=False)
    plots = [accuracy_bars(df, ctx.out_dir / "accuracy.png")]
    if runs:
        plots.append(training_curves(runs, ctx.out_dir / "curves.png"))
        plots.append(tokens_per_update_plot(runs, ctx.out_dir / "tokens_per_update.png"))
        speed = _rollouts(params, runs, ctx)
        if speed is not None:
            plots.append(ctx.out_dir / "rollouts.png")
            out["rollouts_to_target"] = speed
    if params.paper == "vsr_agentic":
        out["paper_rows_measured"] = _paper_agentic(results, tokens, ctx)
    elif params.paper is not None:
        out["paper_rows_measured"] = _paper(params, results, ctx)
    if params.analyses:
        out["analyses"] = _analyses(params, ctx, results, runs, tokens)
        plots += [ctx.out_dir / f"analysis_{n}.png" for n in params.analyses]
    verdicts, text = _claims(params, results, runs)
    (ctx.out_dir / "claims.md").write_text(text)
    if params.preregistration is not None:
        with open(ctx.out_dir / "tables.md", "a") as f:
            f.write("\n" + text)
    pd.DataFrame([{**v.row(), "eval_set": where} for where, vs in verdicts for v in vs]).to_csv(
        ctx.out_dir / "claims.csv", index=False)
    out["claims"] = {v.claim.id: v.verdict for v in verdicts[0][1]}
    if len(verdicts) > 1:
        out["claims_by_set"] = {where: {v.claim.id: v.verdict for v in vs} for where, vs in verdicts}
    return {**out, "plots": [p.name for p in plots]}


def _with_model(name: str, summary: dict) -> dict:
    """The run's summary with the model of its grid cell, so that runs of several models pair by
    (model, seed) in the claims."""
    from analysis.paper import cell_model
    model = cell_model(name, summary)
    if model is None:
        raise ValueError(f"tables: input {name!r} does not name a grid cell "
                         f"run_<model>-{summary['method']}-s{summary['seed']}")
    return {**summary, "model": model}


def _analyses(params: Params, ctx: StageContext, results: list, runs: list, tokens) -> list[str]:
    from analysis.paper_analyses import Inputs, run_all
    from components.stages.common import read_json

    policies = []
    if any(a in POLICY_ANALYSES for a in params.analyses):
        for name, d in sorted(ctx.inputs.items()):
            if name.startswith("policy_"):
                policies.append((f"base {name[len('policy_'):]}", d, ctx.input("hard_" + name[len("policy_"):])))
            elif name.startswith("run_"):
                s = read_json(d / "summary.json")
                policies.append((f"{s['method']} seed {s['seed']} ({s['steps']} updates)", d,
                                 ctx.input("hard_" + name)))
    settings = {"vsr_states": params.vsr_states.model_dump(), "vigor_speedup": params.vigor_speedup.model_dump()}
    secs = run_all(list(params.analyses), Inputs(results, runs, policies, tokens), ctx.out_dir,
                   {a: settings.get(a, {}) for a in params.analyses})
    with open(ctx.out_dir / "tables.md", "a") as f:
        f.write("\n" + (ctx.out_dir / "analyses.md").read_text())
    return [s.name for s in secs]


def _claims(params: Params, results: list, runs: list) -> tuple[list, str]:
    """[(eval set, verdicts)] and their Markdown: every claim on the default set; with a
    pre-registration, its block, then its claims on its primary set, then on each other set."""
    from analysis.claims import CLAIMS, claims_markdown, evaluate_claims
    from analysis.tables import eval_set
    from components.preregistration import markdown

    kw = dict(rollouts_target=params.rollouts_target, window=params.smooth_window,
              fraction=params.rollouts_fraction)
    pre = params.preregistration
    if pre is None:
        verdicts = evaluate_claims(results, runs, **kw)
        return [(None, verdicts)], claims_markdown(verdicts)
    claims = [c for c in CLAIMS if c.id in pre["claims"]]
    sets = [pre["primary"]] + [s for s in pre["eval_sets"] if s != pre["primary"]]
    have = {eval_set(r) for r in results}
    if pre["primary"] not in have:
        raise ValueError(f"tables: preregistration.primary {pre['primary']!r} has no evaluation among the inputs "
                         f"(evaluated: {sorted(have)})")
    # the second measures repeat the accuracy claims only (the others do not depend on the set)
    out = [(s, evaluate_claims(results, runs, [c for c in claims if s == pre["primary"] or c.kind == "accuracy"],
                               eval_set=s, **kw)) for s in sets if s in have]
    text = markdown(pre) + "\n" + "\n".join(
        claims_markdown(vs, f"Pre-registered claims on {s}" + (" (the judged set)" if s == pre["primary"]
                                                               else " (second measure)")) for s, vs in out)
    return out, text


def _grading_reasons(samples: list):
    """One row per (evaluation set, method): samples, and the share graded each failing reason."""
    import json
    from collections import Counter

    import pandas as pd

    from analysis.tables import eval_set
    from components.reward.grader import REASONS

    counts: dict[tuple[str, str], Counter] = {}
    for res, path in samples:
        c = counts.setdefault((eval_set(res), res["method"]), Counter())
        with open(path) as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                reason = json.loads(line).get("reason")
                if reason not in REASONS:
                    raise ValueError(f"{path}: line {i}: field 'reason' is {reason!r}, not one of {REASONS}")
                c[reason] += 1
    rows = [{"eval_set": w, "method": m, "samples": sum(c.values()),
             **{r: c[r] / max(1, sum(c.values())) for r in REASONS if r not in ("correct", "wrong")}}
            for (w, m), c in counts.items()]
    df = pd.DataFrame(rows)
    return df.drop(columns="eval_set") if df["eval_set"].nunique() == 1 else df


def _rollouts(params: Params, runs, ctx: StageContext) -> list | None:
    """Rollouts to the target, a table and a plot per model (each model has its own target)."""
    import pandas as pd

    from analysis.rollouts import by_model, rollouts_plot, rollouts_table
    from analysis.tables import to_markdown

    if not any(s["method"] == params.rollouts_baseline for s, _ in runs) and params.rollouts_target is None:
        return None  # no baseline run in this sweep: no target to measure against
    groups = by_model(runs)
    records, frames = [], []
    for model, rs in groups.items():
        try:
            df, target = rollouts_table(rs, params.rollouts_baseline, params.rollouts_target,
                                        params.rollouts_fraction, params.smooth_window)
        except ValueError:  # the baseline never validated (val_size 0)
            continue
        one = len(groups) == 1
        if not one:
            df.insert(0, "model", model)
        frames.append(df)
        rollouts_plot(rs, target, ctx.out_dir / ("rollouts.png" if one else f"rollouts_{model}.png"),
                      params.rollouts_baseline, params.smooth_window)
        with open(ctx.out_dir / "tables.md", "a") as f:
            f.write("\n" + to_markdown(df, f"Rollouts to validation accuracy {target:.3f}" + ("" if one else f": {model}"))
                    + f"\nValidation curves smoothed (trailing mean of {params.smooth_window}); target: the accuracy "
                      f"every {params.rollouts_baseline} seed reaches; rollouts_to_target: mean over seeds with a "
                      "bootstrap interval over seeds, NaN = not reached in every seed (see `reached`).\n")
        records += df.to_dict("records")
    if not frames:
        return None
    pd.concat(frames).to_csv(ctx.out_dir / "rollouts_to_target.csv", index=False)
    return records


def _paper_agentic(results: list, tokens, ctx: StageContext) -> int:
    from analysis import paper as P

    df = P.agentic_side_by_side(results, tokens)
    P.write_all(df, ctx.out_dir, "paper_vs_measured", "VSR agentic: paper beside measured (settings differ)")
    with open(ctx.out_dir / "tables.md", "a") as f:
        f.write("\n" + P.to_markdown(df, "VSR agentic: paper beside measured (settings differ)"))
    return int(df["measured_value"].notna().sum())


def _paper(params: Params, results: list, ctx: StageContext) -> int:
    from analysis import paper as P

    rows = {"vsr": P.VSR_TABLE1, "vigor": P.VIGOR_TABLE1, "vip": P.VIP_REFERENCE}[params.paper]
    sbs = P.side_by_side(rows, P.measured_from_results(results), how="left")
    P.write_all(sbs, ctx.out_dir, "paper_vs_measured", f"{params.paper.upper()}: paper vs measured")
    return int(sbs["measured"].notna().sum())
