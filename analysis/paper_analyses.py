"""The papers' CPU-sized analyses as part of a sweep's tables stage (``stages.tables.analyses``):
each reads the sweep's artifacts, writes a Markdown section, one plot (PNG) and rows of
``paper_vs_measured`` (the paper's number or statement beside the measured one).

- ``vsr_states``: VSR Figure 7 and both Appendix D.5 checks (``analysis/vsr_states.py``) on the
  sweep's base policy and each trained checkpoint, on the hard subset each was trained on;
- ``invalid_rollouts``: VIGOR's invalid (zero-variance) group share per update, per method
  (``analysis/invalid_rollouts.py``), from the train runs' records;
- ``vigor_selection``: VIGOR's selection ablation (Section 5.3, Figure 5 left): accuracy, invalid
  share and rollouts per update of variance-based (``vigor``), random and difficulty-based
  selection at the same budget, each against ``vigor``;
- ``vigor_speedup``: Theorem 2's closed form against a Monte-Carlo simulation
  (``analysis/vigor_speedup.py``) at the schedule in the settings; it reads no artifact.

These are analyses at the sweep's size, not claims: no verdict is drawn from them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from analysis.plots import plt, save

Run = tuple[dict[str, Any], list[dict]]


@dataclass
class Inputs:
    results: list[dict]                              # evaluate outputs' results.json
    runs: list[Run]                                  # train outputs' (summary, metrics rows)
    policies: list[tuple[str, Path, Path]] = field(default_factory=list)   # (label, model artifact, hard artifact)
    tokens: pd.DataFrame | None = None


@dataclass
class Section:
    name: str
    markdown: str
    rows: list[dict]      # paper_vs_measured rows
    plot: Path


def _row(analysis: str, quantity: str, paper: Any, source: str, measured: Any, on: str) -> dict:
    return {"analysis": analysis, "quantity": quantity, "paper": paper, "paper source": source,
            "measured": measured, "measured on": on}


def _n(k: int, what: str) -> str:
    return f"{k} {what}" + ("" if k == 1 else "s")


# ------------------------------------------------------------------ VSR: Figure 7 and D.5
def vsr_states(inp: Inputs, out: Path, s: dict) -> Section:
    from analysis import vsr_states as vs

    if not inp.policies:
        raise ValueError("tables: analysis vsr_states needs the sweep's policies (pretrain / train outputs with "
                         "their hard subset) among the inputs")
    parts, rows, curves = [], [], []
    src7, src5 = "VSR Figure 7 (Qwen2.5-7B-Instruct)", "VSR Appendix D.5 (Qwen2.5-7B-Instruct)"
    for label, model, hard in inp.policies:
        curve, checks = vs.measure(model, hard, s["split"], s["max_problems"], s["n_curve"], s["n_prefix"],
                                   s["max_new_tokens"], seed=s["seed"], skip_few_mixed=True,
                                   d5_scan=s.get("d5_scan"), d5_mixed=s.get("d5_mixed"))
        curves.append((label, curve))
        parts.append(f"#### Policy: {label}\n\n" + vs.report(curve, checks).replace("### ", "##### "))
        on = f"{label}, {curve['problems']} hard problems"
        rows.append(_row("vsr_states", "Figure 7: mean success at alpha 0 / 50 / 100 %", "~0 / ~0.5 / ~1 (read off "
                         "the figure: 'about linearly')", src7,
                         " / ".join(vs.fmt(curve["mean"][i]) for i in (0, 2, 4)), on))
        rows.append(_row("vsr_states", "Figure 7: R^2 of the line through the means", "linear (no number)", src7,
                         vs.fmt(curve["r2"]), on))
        if "not_computed" in checks:
            rows.append(_row("vsr_states", "D.5 sigma-hat validation", "pooled Pearson {} [{}, {}]".format(
                *vs.PAPER["pearson_pooled"]), src5, "not computed: " + checks["not_computed"].split(": ", 1)[-1], on))
            continue
        on = f"{label}, {checks['mixed']} of {checks['problems']} problems mixed"
        for k in ("pearson_pooled", "spearman_pooled"):
            e, lo, hi = checks[k]
            rows.append(_row("vsr_states", k.replace("_", " "), "{} [{}, {}]".format(*vs.PAPER[k]), src5,
                             f"{vs.fmt(e)} [{vs.fmt(lo)}, {vs.fmt(hi)}]", on))
        for k, say in vs.PREFIX_ROWS:
            rows.append(_row("vsr_states", f"{say} (25/50/75 %)", " / ".join(str(v) for v in vs.PAPER[k]),
                             src5, " / ".join(vs.fmt(v) for v in checks[k]), on))
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for i, (label, c) in enumerate(curves):
        a = np.array(c["alphas"]) * 100
        ax.plot(a, c["mean"], marker="o", color=f"C{i}", label=label)
        ax.fill_between(a, c["q25"], c["q75"], color=f"C{i}", alpha=0.2)
    ax.plot([0, 100], [0, 1], ls=":", color="grey", label="the paper's shape (about linear)")
    ax.set(xlabel="expert trace given (%)", ylabel="continuation success", title="VSR Figure 7 on this policy")
    ax.legend(fontsize=7)
    path = save(fig, out / "analysis_vsr_states.png")
    md = ("### VSR Figure 7 and Appendix D.5: the state score on this sweep's policies\n\n"
          f"Continuations of up to {s['max_new_tokens']} tokens, {s['n_curve']} per truncation (Figure 7) and "
          f"{s['n_prefix']} per prefix (D.5), on the hard subset's {s['split']} split: Figure 7 on its first "
          f"{s['max_problems'] or 'all'} problems, D.5 on the {'first ' + str(s['d5_mixed']) if s.get('d5_mixed') else 'all'} "
          f"problems with a mixed first group among its first {s.get('d5_scan') or s['max_problems'] or 'all'}. "
          "Band in the plot: 25-75 % of the per-problem success rates.\n\n" + "\n".join(parts))
    return Section("vsr_states", md, rows, path)


# ------------------------------------------------------------------ VIGOR: invalid rollouts
def invalid_rollouts(inp: Inputs, out: Path, s: dict) -> Section:
    from analysis import invalid_rollouts as ir

    df, steps = ir.table(inp.runs), ir.per_step(inp.runs)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for i, (m, g) in enumerate(steps.groupby("method", sort=True)):
        mean = g.groupby("step")["invalid_share"].mean()
        ax.plot(mean.index, mean.values, color=f"C{i}", label=f"{m} (mean over {_n(g['seed'].nunique(), 'seed')})")
    ax.axhline(ir.PAPER["vigor"][0], ls=":", color="grey", label="paper: VIGOR, ~20 %")
    ax.set(xlabel="update", ylabel="invalid groups (%)", title="Zero-variance groups per update", ylim=(0, 100))
    ax.legend(fontsize=7)
    path = save(fig, out / "analysis_invalid_rollouts.png")
    rows = [_row("invalid_rollouts", f"invalid share per update, {r['method']} (%)",
                 "-" if pd.isna(r["paper %"]) else r["paper %"], r["paper source"],
                 round(float(r["invalid % (all)"]), 1), f"{_n(r['seeds'], 'seed')} x {r['updates']} updates")
            for r in df.to_dict("records")]
    md = ("### VIGOR Figure 9 (left), Appendix B: invalid (zero-variance) groups per update\n\n"
          + df.to_markdown(index=False, floatfmt=".1f") + "\n\nA share of groups (each prompt once), the paper's is "
          "of samples: the same for a fixed group size (GRPO), not for VIGOR's expanded groups.\n")
    return Section("invalid_rollouts", md, rows, path)


# ------------------------------------------------------------------ VIGOR: selection ablation
SELECTION = {"vigor": "variance (VIGOR)", "vigor_random": "random", "vigor_difficulty": "difficulty-based"}


def vigor_selection(inp: Inputs, out: Path, s: dict) -> Section:
    from analysis import invalid_rollouts as ir
    from analysis.tables import accuracy_table

    have = {r["method"] for r in inp.results}
    if missing := [m for m in SELECTION if m not in have]:
        raise ValueError(f"tables: analysis vigor_selection needs evaluations of {', '.join(SELECTION)} "
                         f"(missing: {', '.join(missing)})")
    acc = accuracy_table([r for r in inp.results if r["method"] in SELECTION], None,
                         [r for r in inp.runs if r[0]["method"] in SELECTION], "vigor")
    inv = ir.table([r for r in inp.runs if r[0]["method"] in SELECTION]).set_index("method")
    per_update = {m: np.mean([sm["rollouts"] / sm["steps"] for sm, _ in inp.runs if sm["method"] == m])
                  for m in SELECTION}
    rows_t = []
    for r in acc.to_dict("records"):
        m = r["method"]
        d = r.get("diff_vs_vigor")
        rows_t.append({"selection": SELECTION[m], "method": m, "seeds": r["seeds"], "problems": r["problems"],
                       "mean@k [95% CI]": f"{r['mean@k']:.3f} [{r['lo95']:.3f}, {r['hi95']:.3f}]",
                       "Δ vs variance [95% CI]": "" if d is None or pd.isna(d) else
                       f"{d:+.3f} [{r['diff_lo95']:+.3f}, {r['diff_hi95']:+.3f}]",
                       "invalid % (all)": float(inv.loc[m, "invalid % (all)"]),
                       "rollouts per update": float(per_update[m])})
    table = pd.DataFrame(rows_t)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    x = np.arange(len(acc))
    ax.bar(x, acc["mean@k"], yerr=[acc["mean@k"] - acc["lo95"], acc["hi95"] - acc["mean@k"]], capsize=4,
           color=[f"C{i}" for i in x])
    ax.set_xticks(x, [SELECTION[m] for m in acc["method"]])
    ax.set(ylabel="mean@k (95 % CI)", title="VIGOR selection ablation at the same budget")
    path = save(fig, out / "analysis_vigor_selection.png")
    src = "VIGOR Section 5.3, Figure 5 (left), Qwen2.5-3B"
    rows = [_row("vigor_selection", f"accuracy, {r['selection']}" + (" - variance" if r["method"] != "vigor" else ""),
                 "variance-based best (curves only, no numbers)", src,
                 r["Δ vs variance [95% CI]"] if r["method"] != "vigor" else r["mean@k [95% CI]"],
                 f"{_n(r['seeds'], 'seed')}, {r['problems']} problems") for r in rows_t]
    md = ("### VIGOR Section 5.3: variance-based vs random vs difficulty-based selection\n\n"
          + table.to_markdown(index=False, floatfmt=".3g") + "\n\nSame rounds and budget for the three rules; "
          "'rollouts per update' shows the budget each spent. Δ: paired over seeds and problems.\n")
    return Section("vigor_selection", md, rows, path)


# ------------------------------------------------------------------ VIGOR: Theorem 2
def vigor_speedup(inp: Inputs, out: Path, s: dict) -> Section:
    from analysis import vigor_speedup as sp

    rows_t = sp.table(alpha=s["alpha"], gamma=s["gamma"], T=s["T"], prompts=s["prompts"], reps=s["reps"], seed=s["seed"])
    df = pd.DataFrame(rows_t)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.plot(df["k"], df["speedup (Eq. 4)"], marker="o", label="closed form (Eqs. 4, 22)")
    ax.errorbar(df["k"], df["speedup (Monte Carlo)"], yerr=1.96 * df["speedup SE"], fmt="x", capsize=3,
                label=f"Monte Carlo ({s['reps']} x {s['prompts']} prompts)")
    ax.set(xlabel="Pareto shape k", ylabel="GRPO / VIGOR timescale", title=f"VIGOR Theorem 2 (T={s['T']}, "
           f"gamma={s['gamma']:g}, alpha={s['alpha']:g})")
    ax.legend(fontsize=7)
    path = save(fig, out / "analysis_vigor_speedup.png")
    rows = [_row("vigor_speedup", f"speedup at k = {r['k']:g}", round(r["speedup (Eq. 4)"], 4),
                 "VIGOR Theorem 2 (Eq. 22, Appendix D.2), the closed form", round(r["speedup (Monte Carlo)"], 4),
                 f"Monte Carlo, {r['batches x prompts']} prompts") for r in rows_t]
    rows.append(_row("vigor_speedup", "empirical rollout efficiency (a different quantity)", sp.PAPER_EMPIRICAL,
                     "VIGOR Figure 1 (right)", "not measured by a simulation", "-"))
    md = (f"### VIGOR Theorem 2: the closed form against a Monte-Carlo simulation\n\nA simulation, no training "
          f"artifact: {s['reps']} batches of {s['prompts']} Pareto(k) variances, ranked by their true value.\n\n"
          + sp.markdown(rows_t) + "\n")
    return Section("vigor_speedup", md, rows, path)


ANALYSES: dict[str, Callable[[Inputs, Path, dict], Section]] = {
    "vsr_states": vsr_states, "invalid_rollouts": invalid_rollouts, "vigor_selection": vigor_selection,
    "vigor_speedup": vigor_speedup,
}


def run_all(names: list[str], inp: Inputs, out: Path, settings: dict[str, dict]) -> list[Section]:
    """Each named analysis, in order; writes ``analyses.md`` and ``paper_vs_measured_analyses.csv``."""
    secs = [ANALYSES[n](inp, out, settings[n]) for n in names]
    md = "## Paper analyses\n\n" + "\n".join(
        f"{s.markdown}\n![{s.name}]({s.plot.name})\n" for s in secs)
    pvm = pd.DataFrame([r for s in secs for r in s.rows])
    md += "\n#### Paper beside measured (the settings differ: see each section)\n\n" + pvm.to_markdown(index=False) + "\n"
    (out / "analyses.md").write_text(md)
    pvm.to_csv(out / "paper_vs_measured_analyses.csv", index=False)
    return secs
