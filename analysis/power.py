"""The power calculation that sizes a claims study from a pilot's per-seed, per-problem results.

Model of one method's (training seed s, problem p) accuracy (mean over the k samples):
``y_sp = mu + a_s + b_p + e_sp`` with between-seed variance ``var_seed``, between-problem variance
``var_problem`` and a residual ``var_resid`` (seed x problem interaction plus the binomial noise of
k samples). Estimated by the two-way ANOVA method of moments on the seeds x problems matrix
(negative components set to 0). The mean over S seeds and P problems then has variance
``var_seed/S + var_problem/P + var_resid/(S*P)``; the 95 % half-width is 1.96 x its square root
(the hierarchical bootstrap of ``analysis.stats`` estimates the same quantity).

The claims sized are the sanity claim and the papers' accuracy claims of the pilot's task (its
evaluations' ``task``: math, or agentic with the held-out maps as problems) that have a paper
effect. A claim compares two trained methods with the same seeds and problems (VSR vs GRPO). The pilot
has one trained method (GRPO) and the base policy, so the difference's components are
projected, as stated in the output: seed and residual terms of two independent training runs
(2 x GRPO's ``var_seed``, 2 x ``var_resid``), and the between-problem heterogeneity of an effect
taken from GRPO - base (a real training effect's spread over problems). The sanity claim
(GRPO - base) uses its own difference matrix.

Requirement (docs/studies.md): the half-width at most half the paper's effect scaled to this
regime (``analysis.claims.PAPER_EFFECT_RULE``, with GRPO's pilot mean as the other method's
level). The output gives, per claim and evaluation set, the fewest seeds that meet it at each
problem count, and the half-width at the pilot's design.

    RLVR_HOME=... python -m analysis.power study_pilot [--problems 400,1050] [--max-seeds 40]
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Z95 = 1.959964
# problem counts the output sizes seeds for, per task. Math: the hard held-out cap of the sweeps and
# arith_levels' size. Agentic: held-out maps come from a seed generator (no cap), so the ladder runs
# from the diagnostics' 256 maps up.
PROBLEM_COUNTS = {"math": [400, 1050], "agentic": [256, 1024, 2048, 4096]}


@dataclass(frozen=True)
class Components:
    mean: float
    var_seed: float
    var_problem: float
    var_resid: float
    seeds: int
    problems: int

    def half_width(self, seeds: int, problems: int) -> float:
        return Z95 * math.sqrt(self.var_seed / seeds + self.var_problem / problems
                               + self.var_resid / (seeds * problems))


def components(A: np.ndarray) -> Components:
    """Variance components of a (seeds x problems) matrix (one row: no seed terms)."""
    A = np.asarray(A, dtype=float)
    if A.ndim != 2 or A.shape[1] < 2:
        raise ValueError(f"components: need a seeds x problems matrix with >= 2 problems, got {A.shape}")
    S, P = A.shape
    m, rows, cols = A.mean(), A.mean(axis=1), A.mean(axis=0)
    ms_cols = S * ((cols - m) ** 2).sum() / (P - 1)
    if S == 1:
        return Components(float(m), 0.0, float(ms_cols), 0.0, 1, P)
    ms_rows = P * ((rows - m) ** 2).sum() / (S - 1)
    ms_res = ((A - rows[:, None] - cols[None, :] + m) ** 2).sum() / ((S - 1) * (P - 1))
    return Components(float(m), max(0.0, (ms_rows - ms_res) / P), max(0.0, (ms_cols - ms_res) / S),
                      float(ms_res), S, P)


def seeds_needed(c: Components, target: float, problems: int, max_seeds: int) -> int | None:
    """The fewest seeds (>= 2) whose half-width at ``problems`` is <= ``target``; None if not by max_seeds."""
    for s in range(2, max_seeds + 1):
        if c.half_width(s, problems) <= target:
            return s
    return None


def pilot_components(results: list[dict], eval_set: str, method: str = "grpo", base: str = "base") -> dict:
    """{'method': GRPO's components, 'effect': GRPO - base's, 'projected': a trained-vs-trained
    difference's} on ``eval_set``, from evaluate results (``per_problem``, one per seed)."""
    from analysis.stats import accuracy_matrix
    from analysis.tables import eval_set as set_of

    M = [r for r in results if r["method"] == method and set_of(r) == eval_set]
    B = [r for r in results if r["method"] == base and set_of(r) == eval_set]
    if len(M) < 2 or not B:
        raise ValueError(f"power: {eval_set}: need >= 2 seeds of {method} and the {base} policy "
                         f"(have {len(M)} and {len(B)})")
    A, _, uids = accuracy_matrix(M)
    R, _, _ = accuracy_matrix(B, uids)
    own, eff = components(A), components(A - R.mean(axis=0))
    proj = Components(0.0, 2 * own.var_seed, eff.var_problem, 2 * own.var_resid, own.seeds, own.problems)
    return {"method": own, "effect": eff, "projected": proj}


def results_task(results: list[dict]) -> str:
    """The task of a pilot's evaluations (``math`` unless they say otherwise); one per pilot."""
    tasks = {r.get("task", "math") for r in results}
    if len(tasks) != 1:
        raise ValueError(f"power: the evaluations mix tasks {sorted(tasks)}; a pilot is of one task")
    return tasks.pop()


def power_rows(results: list[dict], problem_counts: list[int], max_seeds: int = 40) -> list[dict]:
    from analysis.paper_claims import CLAIMS
    from analysis.tables import eval_set as set_of

    sets = sorted({set_of(r) for r in results if r["method"] == "grpo"}, key=lambda s: (s != "arith_levels", s))
    task = results_task(results)
    rows = []
    for where in sets:
        pc = pilot_components(results, where)
        level = pc["method"].mean
        claims = [("grpo>base", "sanity", None, pc["effect"])]
        claims += [(c.id, c.paper, c.paper_effect, pc["projected"]) for c in CLAIMS
                   if c.kind == "accuracy" and c.paper_effect is not None and c.task == task]
        for cid, paper, rel, comp in claims:
            # the sanity claim has no paper effect: its requirement is an interval that excludes 0 at
            # the pilot's own effect, i.e. half-width <= half the measured GRPO - base difference
            effect = rel * level if rel is not None else pc["effect"].mean
            target = abs(effect) / 2
            row = {"eval_set": where, "claim": cid, "paper": paper, "rel_effect": rel, "effect_here": effect,
                   "target_half_width": target,
                   "pilot_half_width": comp.half_width(comp.seeds, comp.problems),
                   "pilot_design": f"{comp.seeds} seeds x {comp.problems} problems"}
            for p in problem_counts:
                row[f"seeds@{p}"] = seeds_needed(comp, target, p, max_seeds)
            rows.append(row)
    return rows


def components_rows(results: list[dict]) -> list[dict]:
    from analysis.tables import eval_set as set_of

    out = []
    for where in sorted({set_of(r) for r in results if r["method"] == "grpo"}, key=lambda s: (s != "arith_levels", s)):
        for name, c in pilot_components(results, where).items():
            out.append({"eval_set": where, "matrix": {"method": "grpo", "effect": "grpo - base",
                                                      "projected": "method - method (projected)"}[name],
                        "mean": c.mean, "sd_seed": math.sqrt(c.var_seed), "sd_problem": math.sqrt(c.var_problem),
                        "sd_resid": math.sqrt(c.var_resid), "seeds": c.seeds, "problems": c.problems})
    return out


def power_markdown(results: list[dict], problem_counts: list[int], max_seeds: int = 40) -> str:
    import pandas as pd

    comp = pd.DataFrame(components_rows(results))
    rows = pd.DataFrame(power_rows(results, problem_counts, max_seeds))
    for c in [c for c in rows.columns if c.startswith("seeds@")]:
        rows[c] = [f"> {max_seeds}" if pd.isna(v) else str(int(v)) for v in rows[c]]
    rows["rel_effect"] = ["(measured)" if pd.isna(v) else f"{v:+.1%}" for v in rows["rel_effect"]]
    fmt = lambda df: df.to_markdown(index=False, floatfmt=".4f")  # noqa: E731
    return ("## Variance components of the pilot (accuracy per problem, mean of its samples)\n\n" + fmt(comp)
            + "\n\n## Seeds needed for a 95 % half-width <= half the effect\n\n" + fmt(rows)
            + f"\n\nseeds@P: the fewest training seeds (2..{max_seeds}) that meet the target with P problems; "
            "effect_here: the paper's relative effect x GRPO's pilot mean on the set (the sanity claim: the "
            "measured GRPO - base); a method-vs-method difference is projected from GRPO's seed and residual "
            "variance (x 2) and the between-problem spread of GRPO - base (analysis/power.py).\n")


def sweep_results(sweep: str) -> list[dict]:
    """The evaluate results behind the sweep's latest finished tables run (its manifest's inputs)."""
    import json

    from components import tracking
    from components.artifacts import read_manifest

    run = tracking.latest_tables_run(sweep)
    out = Path(run.data.tags.get("rlvr.output_uri", "/nonexistent"))
    man = read_manifest(out)
    if man is None:
        raise LookupError(f"power: {out}: no manifest.json (the tables artifact of sweep {sweep!r} is not in this store)")
    res = []
    for name, inp in sorted(man["inputs"].items()):
        f = Path(inp["uri"]) / "results.json"
        if name.startswith("eval_") and f.is_file():
            res.append(json.loads(f.read_text()))
    if not res:
        raise LookupError(f"power: the tables run of {sweep!r} has no evaluate inputs on disk")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep")
    ap.add_argument("--problems", default=None,
                    help="comma-separated problem counts (default: the pilot task's, PROBLEM_COUNTS)")
    ap.add_argument("--max-seeds", type=int, default=40)
    a = ap.parse_args(argv)
    try:
        results = sweep_results(a.sweep)
        counts = ([int(x) for x in a.problems.split(",")] if a.problems
                  else PROBLEM_COUNTS[results_task(results)])
        print(power_markdown(results, counts, a.max_seeds))
    except (LookupError, ValueError) as e:
        print(f"power: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
