"""The papers' own numbers, as data, so the sweep's tables can show them side by side.

Every value is transcribed from the papers (the table or paragraph and the row are named in
each block's ``source``); ``tests/analysis/test_paper_tables.py`` re-reads the papers' texts, where they
are staged beside the project, and checks the transcription. Values are percentages (accuracy x 100)
unless ``metric`` says otherwise.

Rows are long-format dicts: ``paper, source, model, method, benchmark, metric, value`` (+ an
optional ``note``). ``model`` is the paper's HF id (``Qwen/Qwen2.5-7B-Instruct``), ``method``
the registry name of ``components.methods`` where one exists (``grpo``, ``vsr``,
``static_prefix``, ``reinforce_ada_est``, ``greso``, ``rl_zvp``, ``vigor``; GRESO-g, the
unmatched-budget variant, is ``greso_g``), ``benchmark`` the name in
``components.data.benchmarks.BENCHMARKS`` or ``"avg"`` (the paper's average column).

What the papers' texts we had do NOT give (left out, not guessed):

- VSR Table 1's Qwen2.5-7B-Instruct rows, and its base / SFT rows: the text has only the
  Llama-3.2-3B-Instruct numbers quoted in its math results / Appendix D.5 (GRPO, static uniform
  expert-prefix resets, VSR, Reinforce-Ada-Est; one training run each).
- VIP: we had an AI summary of the paper with no results table; it gives only improvements
  (RLOO+VIP over RLOO on Qwen2.5-Math-1.5B at budget 8xQ: Pass@32 +12.3, Mean@32 +6.3) and
  the tool-augmented exact-match scores (Bamboogle, MuSiQue), kept in :data:`VIP_REFERENCE`
  with ``metric`` ``pass@32-delta`` / ``mean@32-delta`` / ``EM``; no absolute AIME numbers.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:  # imported where a frame is built: sweep validation reads the numbers without pandas
    import pandas as pd

# ------------------------------------------------------------------ VSR (the paper this project reproduces)
VSR_BENCHMARKS = ["aime24", "aime25", "amc23", "olympiadbench", "math500", "minerva_math"]
_VSR_LLAMA = "meta-llama/Llama-3.2-3B-Instruct"
# (method, [AIME24, AIME25, AMC23, OlympiadBench, MATH500, Minerva, Avg.], where in the paper)
_VSR_TABLE1 = [
    ("grpo", [4.4, 1.0, 18.7, 12.6, 39.2, 16.5, 15.4],
     "Table 1 / Appendix D.5 'static uniform expert-prefix resets' paragraph, row GRPO"),
    ("static_prefix", [5.6, 0.5, 22.7, 14.1, 43.7, 15.8, 17.1],
     "Table 1 / Appendix D.5, row static uniform expert-prefix resets"),
    ("vsr", [6.2, 0.6, 20.4, 15.3, 54.0, 17.8, 19.1],
     "Table 1 / Appendix D.5, row VSR(+GRPO)"),
    ("reinforce_ada_est", [4.2, 0.1, 18.0, 12.4, 39.9, 15.4, 15.0],
     "Table 1 / Appendix D.5 'Reinforce-Ada-Est' paragraph (matched 1024 responses per update)"),
]
VSR_TABLE1: list[dict[str, Any]] = [
    {"paper": "VSR", "source": f"VSR paper: {where}", "model": _VSR_LLAMA, "method": m,
     "benchmark": b, "metric": "mean@16", "value": v, "note": "single training run"}
    for m, vals, where in _VSR_TABLE1 for b, v in zip(VSR_BENCHMARKS + ["avg"], vals)]

# Generated tokens at matched update counts: agentic (GiGPO, Sokoban/BabyAI) runs, the results'
# token-accounting paragraph and Appendix D.5 of the VSR paper. Not the math setting.
VSR_TOKENS: list[dict[str, Any]] = [
    {"paper": "VSR", "source": "VSR paper: token-accounting paragraph (agentic results) / Appendix D.5",
     "model": model, "method": method, "benchmark": "agentic", "metric": "generated_tokens",
     "value": tokens, "updates": updates}
    for model, updates, pairs in (
        ("Qwen/Qwen2.5-1.5B-Instruct", 150, (("vsr_gigpo", 39.27e6), ("gigpo", 81.30e6))),
        ("Qwen/Qwen2.5-3B-Instruct", 100, (("vsr_gigpo", 34.43e6), ("gigpo", 36.26e6))))
    for method, tokens in pairs]

# BabyAI, Qwen2.5-1.5B-Instruct, three independent training runs each (Appendix D.5 of the VSR paper,
# the scoring ablation): VSR(+GiGPO) and uniform replay (VSR w/o scoring, +GiGPO). Success rate in %.
VSR_BABYAI_RUNS = {"vsr_gigpo": (47.6, 50.8, 46.1), "uniform_gigpo": (46.1, 39.1, 46.9)}
VSR_BABYAI: list[dict[str, Any]] = [
    {"paper": "VSR", "source": "VSR paper: Appendix D.5, Qwen2.5-1.5B BabyAI three runs",
     "model": "Qwen/Qwen2.5-1.5B-Instruct", "method": method, "benchmark": "babyai",
     "metric": f"success (run {i + 1})", "value": v, "note": "independent training run; 128 map seeds per level"}
    for method, runs in VSR_BABYAI_RUNS.items() for i, v in enumerate(runs)]
# Seed 001 (the newer allocators' abstracts): the cost numbers they state, as shares saved.
# PAIR: generated tokens against full-group GRPO in compute-matched runs, per model.
PAIR_TOKENS_SAVED = {"Qwen3-1.7B": 0.51, "Qwen3-4B": 0.52}
# SARA: rollouts against DS (dynamic sampling, the oracle it is compared with), 1.5B/3B models on
# math and planning; SARA alone and composed with DPS.
SARA_ROLLOUTS_SAVED = {"sara": 0.22, "sara_dps": 0.67}
# our method names on episodes (components/methods/registry.py) -> the paper's agentic names
AGENTIC_METHODS = {"grpo": "gigpo", "vsr": "vsr_gigpo", "vsr_no_scoring": "uniform_gigpo"}

# ------------------------------------------------------------------ VIGOR (Jiang et al., arXiv 2607.22002)
# the column order of VIGOR Table 1: Math500 AIME24 AMC Gaokao Miner. Olymp. Avg.
VIGOR_BENCHMARKS = ["math500", "aime24", "amc23", "gaokao2023en", "minerva_math", "olympiadbench"]
VIGOR_MODELS = {"Qwen2.5-1.5B": "Qwen/Qwen2.5-1.5B", "Qwen2.5-3B": "Qwen/Qwen2.5-3B",
                "Qwen2.5-7B": "Qwen/Qwen2.5-7B", "Phi-4-Mini-Instruct": "microsoft/Phi-4-mini-instruct"}
VIGOR_METHODS = {"GRPO": "grpo", "GRESO-r": "greso", "GRESO-g": "greso_g", "RL-ZVP": "rl_zvp",
                 "VIGOR": "vigor"}
_VIGOR_TABLE1 = {
    "Qwen2.5-1.5B": {"GRPO": [55.2, 3.3, 28.9, 49.6, 20.2, 19.4, 29.5],
                     "GRESO-r": [53.0, 6.7, 24.1, 46.0, 19.1, 21.8, 28.4],
                     "GRESO-g": [57.8, 3.3, 28.9, 51.4, 18.8, 24.2, 30.7],
                     "RL-ZVP": [55.6, 3.3, 33.7, 45.7, 18.8, 21.5, 29.8],
                     "VIGOR": [55.8, 6.7, 27.7, 50.4, 17.6, 22.3, 30.1]},
    "Qwen2.5-3B": {"GRPO": [66.2, 4.2, 37.0, 55.3, 26.6, 30.3, 36.6],
                   "GRESO-r": [66.6, 5.0, 33.7, 57.1, 27.5, 30.1, 36.7],
                   "GRESO-g": [66.4, 8.3, 37.0, 56.2, 27.4, 30.7, 37.7],
                   "RL-ZVP": [65.8, 9.2, 33.7, 57.7, 27.1, 30.4, 37.3],
                   "VIGOR": [65.4, 8.3, 39.2, 56.4, 27.5, 30.6, 37.9]},
    "Qwen2.5-7B": {"GRPO": [79.6, 23.3, 55.4, 64.7, 33.8, 41.8, 49.8],
                   "GRESO-r": [78.2, 16.7, 54.2, 65.7, 36.8, 42.4, 49.0],
                   "GRESO-g": [79.4, 20.0, 57.8, 68.1, 36.0, 40.7, 50.3],
                   "RL-ZVP": [77.4, 16.7, 54.2, 66.8, 36.4, 42.6, 49.0],
                   "VIGOR": [80.4, 23.3, 55.4, 69.1, 35.3, 42.3, 51.0]},
    "Phi-4-Mini-Instruct": {"GRPO": [73.6, 11.7, 40.1, 62.3, 33.5, 36.4, 42.9],
                            "GRESO-r": [72.0, 9.2, 40.4, 59.7, 33.6, 35.9, 41.8],
                            "GRESO-g": [73.4, 14.2, 39.5, 61.5, 33.1, 37.2, 43.1],
                            "RL-ZVP": [72.3, 10.8, 40.7, 60.6, 33.3, 36.8, 42.4],
                            "VIGOR": [73.0, 14.2, 41.6, 61.5, 33.7, 36.4, 43.4]},
}
VIGOR_TABLE1: list[dict[str, Any]] = [
    {"paper": "VIGOR", "source": f"VIGOR paper (arXiv 2607.22002): Table 1, block {model}, row {meth}",
     "model": VIGOR_MODELS[model], "method": VIGOR_METHODS[meth], "benchmark": b, "metric": "acc@1",
     "value": v, **({"note": "GRESO-g uses about twice the rollouts (unmatched budget)"} if meth == "GRESO-g" else {})}
    for model, rows in _VIGOR_TABLE1.items() for meth, vals in rows.items()
    for b, v in zip(VIGOR_BENCHMARKS + ["avg"], vals)]

# ------------------------------------------------------------------ VIP (Nguyen et al., arXiv 2602.01601: an AI summary)
_VIP_SRC = "VIP (arXiv 2602.01601), an AI summary of the paper: 'Main Findings' (no results table)"
VIP_REFERENCE: list[dict[str, Any]] = [
    {"paper": "VIP", "source": _VIP_SRC, "model": "Qwen/Qwen2.5-Math-1.5B", "method": "vip", "benchmark": "aime",
     "metric": "pass@32-delta", "value": 12.3, "note": "RLOO+VIP minus RLOO, budget 8xQ, AIME24/25"},
    {"paper": "VIP", "source": _VIP_SRC, "model": "Qwen/Qwen2.5-Math-1.5B", "method": "vip", "benchmark": "aime",
     "metric": "mean@32-delta", "value": 6.3, "note": "RLOO+VIP minus RLOO, budget 8xQ, AIME24/25"},
] + [
    {"paper": "VIP", "source": _VIP_SRC, "model": "unspecified", "method": method, "benchmark": bench,
     "metric": "EM", "value": v, "note": "tool-augmented reasoning; model not named in the summary"}
    for method, bench, v in (("drgrpo", "bamboogle", 20.0), ("drgrpo+vip", "bamboogle", 23.2),
                             ("drgrpo", "musique", 6.0), ("drgrpo+vip", "musique", 10.5),
                             ("rloo", "bamboogle", 10.4), ("rloo+vip", "bamboogle", 17.6),
                             ("rloo", "musique", 8.5), ("rloo+vip", "musique", 11.0))]


def model_key(name: str) -> str:
    """``meta-llama/Llama-3.2-3B-Instruct`` and ``llama-3.2-3b-instruct`` compare equal."""
    base = str(name).rstrip("/").split("/")[-1]
    return re.sub(r"[^a-z0-9.]+", "-", base.lower()).strip("-.")


def result_model(r: dict[str, Any]) -> str:
    """The model slug of an evaluate result: its label without ``@<benchmark>`` and the
    ``-<method>-s<seed>`` / ``-base`` suffix."""
    label = str(r.get("label", "")).split("@")[0]
    method = r.get("method", "base")
    return re.sub(rf"-(?:{re.escape(method)}-s\d+|base)$", "", label)


def cell_model(input_name: str, summary: dict[str, Any]) -> str | None:
    """The model of the grid cell a train output came from, read from its input name
    ``run_<model>-<method>-s<seed>`` (stage_graph's names); None for a name of another form."""
    key = input_name.removeprefix("run_")
    model = result_model({"label": key, "method": summary["method"]})
    return model if input_name.startswith("run_") and key == f"{model}-{summary['method']}-s{summary['seed']}" else None


def measured_from_results(results: Sequence[dict[str, Any]], models: dict[str, str] | None = None,
                          scale: float = 100.0, metric: str = "mean_at_k") -> pd.DataFrame:
    """evaluate ``results.json`` dicts -> long DataFrame ``model, method, benchmark, measured``
    (mean over training seeds, x ``scale``), plus an ``avg`` row per (model, method) over the
    benchmarks present. A result's model is ``models[label prefix]`` if given, else its label
    without the ``-<method>-s<seed>`` / ``-base`` / ``@<benchmark>`` suffixes. Results without
    a ``benchmark`` (the held-out split) are skipped."""
    import pandas as pd

    rows = []
    for r in results:
        bench = r.get("benchmark")
        if not bench:
            continue
        method = r.get("method", "base")
        stem = result_model(r)
        model = (models or {}).get(stem, stem)
        rows.append({"model": model, "method": method, "benchmark": bench, "measured": scale * float(r[metric])})
    if not rows:
        return pd.DataFrame(columns=["model", "method", "benchmark", "measured"])
    df = pd.DataFrame(rows).groupby(["model", "method", "benchmark"], as_index=False, sort=False)["measured"].mean()
    avg = df.groupby(["model", "method"], as_index=False, sort=False)["measured"].mean().assign(benchmark="avg")
    return pd.concat([df, avg[df.columns]], ignore_index=True)


def side_by_side(paper_rows: Iterable[dict[str, Any]] | pd.DataFrame, measured_df: pd.DataFrame,
                 how: str = "left") -> pd.DataFrame:
    """One row per paper number: ``paper, model, method, benchmark, metric, paper_value,
    measured, delta`` (delta = measured - paper_value; NaN where nothing was measured).

    ``measured_df`` is long (``model, method, benchmark`` + ``measured`` or ``value``);
    models are matched by :func:`model_key` so an HF id and its slug meet. ``how="outer"``
    also keeps measured rows the paper does not have."""
    import pandas as pd

    rows = paper_rows if isinstance(paper_rows, pd.DataFrame) else list(paper_rows)
    paper = pd.DataFrame(rows).rename(columns={"value": "paper_value"})
    meas = measured_df.copy()
    if "measured" not in meas:
        if "value" not in meas:
            raise ValueError("measured_df needs a 'measured' (or 'value') column")
        meas = meas.rename(columns={"value": "measured"})
    missing = {"model", "method", "benchmark"} - set(meas.columns)
    if missing:
        raise ValueError(f"measured_df lacks columns {sorted(missing)}")
    paper["_mk"] = paper["model"].map(model_key)
    meas["_mk"] = meas["model"].map(model_key)
    meas = meas.rename(columns={"model": "measured_model"})[["_mk", "measured_model", "method", "benchmark", "measured"]]
    out = paper.merge(meas, on=["_mk", "method", "benchmark"], how=how)
    if how != "left" and "measured_model" in out:
        out["model"] = out["model"].fillna(out["measured_model"])
    out["delta"] = out["measured"] - out["paper_value"]
    cols = [c for c in ("paper", "model", "method", "benchmark", "metric", "paper_value", "measured", "delta",
                        "source") if c in out]
    return out[cols].reset_index(drop=True)


def wide(df: pd.DataFrame, value: str = "delta") -> pd.DataFrame:
    """``side_by_side`` output pivoted like the papers' tables: rows (model, method),
    one column per benchmark (``avg`` last)."""
    t = df.pivot_table(index=["model", "method"], columns="benchmark", values=value, aggfunc="first", sort=False)
    order = [c for c in t.columns if c != "avg"] + (["avg"] if "avg" in t.columns else [])
    return t[order].reset_index()


# ------------------------------------------------------------------ writers
def to_markdown(df: pd.DataFrame, title: str | None = None) -> str:
    body = df.to_markdown(index=False, floatfmt=".1f")
    return (f"## {title}\n\n" if title else "") + body + "\n"


def to_csv(df: pd.DataFrame, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path


def to_latex(df: pd.DataFrame, caption: str | None = None, label: str | None = None) -> str:
    """A booktabs tabular (pandas Styler; needs jinja2); text is LaTeX-escaped, NaN cells empty."""
    sty = df.style.format(precision=1, na_rep="", escape="latex").hide(axis="index")
    return sty.to_latex(hrules=True, caption=caption, label=label, position_float="centering" if caption else None)


def write_all(df: pd.DataFrame, out_dir: str | Path, stem: str = "paper_vs_measured",
              title: str = "Paper vs measured") -> dict[str, Path]:
    """``<stem>.md``, ``<stem>.csv`` and ``<stem>.tex`` under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(to_markdown(df, title))
    to_csv(df, out / f"{stem}.csv")
    (out / f"{stem}.tex").write_text(to_latex(df, caption=title))
    return {"md": out / f"{stem}.md", "csv": out / f"{stem}.csv", "tex": out / f"{stem}.tex"}


# ------------------------------------------------------------------ agentic: paper beside measured
def agentic_side_by_side(results: Sequence[dict[str, Any]], tokens: pd.DataFrame | None) -> pd.DataFrame:
    """The VSR paper's agentic numbers beside this sweep's: generated tokens at matched updates (the
    VSR+GiGPO / GiGPO ratio and tokens per update) and success rates (the paper's BabyAI runs;
    measured on whatever environment the sweep ran, named in ``measured_setting``). Rows:
    ``quantity, method, paper_setting, paper_value, measured_setting, measured_value``. Not a
    delta: the settings differ (model size, environment), which the columns say."""
    import pandas as pd

    rows = []
    tok = {} if tokens is None or tokens.empty else {AGENTIC_METHODS.get(r["method"], r["method"]): r
                                                     for r in tokens.to_dict("records")}
    upd = int(next(iter(tok.values()))["updates"]) if tok else None
    env = next((f"{r['env']['env']} {r['env']['config']}" for r in results if isinstance(r.get("env"), dict)), "?")
    where = f"embedded tiny policy, {env}"
    for model, size in (("Qwen/Qwen2.5-1.5B-Instruct", "1.5B"), ("Qwen/Qwen2.5-3B-Instruct", "3B")):
        paper = {r["method"]: r for r in VSR_TOKENS if r["model"] == model}
        setting = f"{size}, {paper['gigpo']['updates']} updates"
        ratio = tok["vsr_gigpo"]["generated_tokens"] / tok["gigpo"]["generated_tokens"] \
            if {"vsr_gigpo", "gigpo"} <= set(tok) else float("nan")
        rows.append({"quantity": "generated tokens VSR+GiGPO as % of GiGPO", "method": "vsr_gigpo",
                     "paper_setting": setting, "paper_value": 100.0 * paper["vsr_gigpo"]["value"] / paper["gigpo"]["value"],
                              "measured_setting": f"{where}, {upd} updates", "measured_value": 100.0 * ratio})
        for m in ("gigpo", "vsr_gigpo"):
            rows.append({"quantity": "generated tokens per update (thousands)", "method": m, "paper_setting": setting,
                         "paper_value": paper[m]["value"] / paper[m]["updates"] / 1e3,
                         "measured_setting": f"{where}, {upd} updates",
                         "measured_value": float(tok[m]["generated_per_update"]) / 1e3 if m in tok else float("nan")})
    success: dict[str, list[float]] = {}
    for r in results:
        if r.get("task") == "agentic" and r.get("method") in AGENTIC_METHODS:
            success.setdefault(AGENTIC_METHODS[r["method"]], []).append(100.0 * float(r["mean_at_k"]))
    for m, runs in VSR_BABYAI_RUNS.items():
        got = success.get(m, [])
        rows.append({"quantity": "success % (mean of runs)", "method": m,
                     "paper_setting": f"BabyAI, 1.5B, runs {'/'.join(f'{v:.1f}' for v in runs)}",
                     "paper_value": sum(runs) / len(runs),
                     "measured_setting": f"{where}, runs {'/'.join(f'{v:.1f}' for v in got) or 'none'}",
                     "measured_value": sum(got) / len(got) if got else float("nan")})
    if "gigpo" in success:
        got = success["gigpo"]
        rows.append({"quantity": "success % (mean of runs)", "method": "gigpo", "paper_setting": "not in the paper's text",
                     "paper_value": float("nan"), "measured_setting": f"{where}, runs {'/'.join(f'{v:.1f}' for v in got)}",
                     "measured_value": sum(got) / len(got)})
    return pd.DataFrame(rows)
