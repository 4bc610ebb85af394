"""The papers' claims as data: what each paper says one method does better than another, where
it says it (table, figure or section of the text in ``/work/shared/seeds/``) and, where the
text gives them, the paper's own numbers (built from ``analysis.paper``'s transcription, so a
number is typed once). ``analysis.claims`` evaluates them on a sweep's records.

Scope of a claim (``task``): the setting the paper makes it in. VSR's Table 1 claims are about
the hard math subset, its Table 2 and ablation claims (Figure 6, the Qwen2.5-1.5B BabyAI runs)
about the agentic environments; a sweep of the other setting reports "not tested".
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

from analysis.paper import (PAIR_TOKENS_SAVED, SARA_ROLLOUTS_SAVED, VIGOR_METHODS, VSR_BABYAI_RUNS, VSR_TOKENS,
                            _VIGOR_TABLE1, _VSR_TABLE1)

Kind = Literal["accuracy", "tokens_per_update", "rollouts_per_update", "rollouts_to_target", "val_early",
               "val_gain", "relative_gain_by_size"]


@dataclass(frozen=True)
class Claim:
    paper: str
    id: str
    text: str
    kind: Kind
    method: str
    other: str
    direction: Literal["higher", "lower"]   # method vs other
    source: str                             # where the paper says it
    paper_numbers: str = ""                 # the paper's own numbers; "" = the text gives none
    task: Literal["math", "agentic"] | None = None   # None: any setting
    # the compared runs must share their advantage estimator (VIP is a plug-in on RLOO / Dr.GRPO)
    same_estimator: bool = False
    # what the project lacks to run the comparison (said when a method is missing)
    needs: str = ""
    # the paper's effect, relative: method / other - 1 on the paper's benchmark average, signed
    # in the claimed direction (> 0); None when the text gives no pair of numbers to form it.
    # ``analysis.claims`` scales it to a sweep (PAPER_EFFECT_RULE) for the fourth verdict.
    paper_effect: float | None = None


def _vsr_avg(method: str) -> float:
    return {m: vals[-1] for m, vals, _ in _VSR_TABLE1}[method]


def _vsr(a: str, b: str) -> str:
    return f"Llama-3.2-3B-Instruct avg {_vsr_avg(a)} vs {_vsr_avg(b)} (one training run each)"


def _vsr_rel(a: str, b: str) -> float:
    return _vsr_avg(a) / _vsr_avg(b) - 1


def _vigor_rel(a: str, b: str) -> float:
    """The mean over VIGOR Table 1's four models of (a's avg / b's avg - 1)."""
    name = {v: k for k, v in VIGOR_METHODS.items()}
    return statistics.mean(rows[name[a]][-1] / rows[name[b]][-1] - 1 for rows in _VIGOR_TABLE1.values())


def _vigor(a: str, b: str) -> str:
    name = {v: k for k, v in VIGOR_METHODS.items()}
    return "; ".join(f"{model} avg {rows[name[a]][-1]} vs {rows[name[b]][-1]}"
                     for model, rows in _VIGOR_TABLE1.items())


def _tokens() -> str:
    by = {}
    for r in VSR_TOKENS:
        by.setdefault((r["model"].split("/")[-1], r["updates"]), {})[r["method"]] = r["value"] / 1e6
    return "; ".join(f"{m}: {t['vsr_gigpo']:.2f}M vs {t['gigpo']:.2f}M over {u} updates (GiGPO runs)"
                     for (m, u), t in by.items())


def _babyai() -> str:
    v, u = VSR_BABYAI_RUNS["vsr_gigpo"], VSR_BABYAI_RUNS["uniform_gigpo"]
    return (f"Qwen2.5-1.5B BabyAI, three runs: {statistics.mean(v):.1f} ± {statistics.stdev(v):.1f} vs "
            f"{statistics.mean(u):.1f} ± {statistics.stdev(u):.1f} (mean ± SD)")


_TABLE1 = "VSR Table 1 (math results; its Llama-3.2-3B rows are quoted in Appendix D.5)"

CLAIMS: tuple[Claim, ...] = (
    # not a paper's claim: the premise of the others (RL training improves the policy)
    Claim("sanity", "grpo>base", "GRPO raises accuracy over the base policy", "accuracy", "grpo", "base",
          "higher", "sanity check (dags/sweeps/sanity.yaml), not a paper's claim"),
    # ---- VSR, math (hard OpenR1 subset, mean@16)
    Claim("VSR", "vsr>grpo", "VSR beats GRPO on the hard subset", "accuracy", "vsr", "grpo", "higher",
          _TABLE1, _vsr("vsr", "grpo"), task="math", paper_effect=_vsr_rel("vsr", "grpo")),
    Claim("VSR", "vsr>static_prefix", "VSR beats static uniform expert-prefix resets", "accuracy", "vsr",
          "static_prefix", "higher", "VSR Table 1 controls paragraph (math results); Appendix D.5",
          _vsr("vsr", "static_prefix"), task="math", paper_effect=_vsr_rel("vsr", "static_prefix")),
    Claim("VSR", "static_prefix>grpo", "Static expert-prefix resets beat GRPO (privileged resets explain part "
          "of the gain)", "accuracy", "static_prefix", "grpo", "higher",
          "VSR Table 1 controls paragraph (math results); Appendix D.5", _vsr("static_prefix", "grpo"), task="math",
          paper_effect=_vsr_rel("static_prefix", "grpo")),
    Claim("VSR", "vsr>reinforce_ada_est", "VSR beats Reinforce-Ada-Est at a matched response budget "
          "(prompt-level reallocation alone does not reproduce the gain)", "accuracy", "vsr", "reinforce_ada_est",
          "higher", "VSR Table 1 controls paragraph (math results); Appendix D.5 Reinforce-Ada-Est paragraph",
          _vsr("vsr", "reinforce_ada_est"), task="math", paper_effect=_vsr_rel("vsr", "reinforce_ada_est")),
    Claim("VSR", "vsr>sft", "VSR beats SFT on the same expert traces", "accuracy", "vsr", "sft", "higher",
          "VSR math setup (VSR+GRPO vs SFT on the same expert trajectories; Table 1)", task="math"),
    Claim("VSR", "grpo<base", "GRPO's final accuracy ends up below the base model on the hard subset",
          "accuracy", "grpo", "base", "lower",
          "VSR training-dynamics paragraph (Figure 4): 'ends up below the base model on both models'",
          task="math"),
    Claim("VSR", "vsr_tokens<grpo", "VSR generates fewer new tokens per update than its base algorithm",
          "tokens_per_update", "vsr", "grpo", "lower", "VSR token-accounting paragraph (agentic results); Appendix D.5",
          _tokens()),
    # ---- VSR, agentic (GiGPO base: grpo in the agentic registry)
    Claim("VSR", "vsr_gigpo>gigpo", "GiGPO+VSR beats GiGPO in task success", "accuracy", "vsr", "grpo", "higher",
          "VSR Table 2 (Sokoban, BabyAI; mostly single runs)", task="agentic"),
    Claim("VSR", "no_scoring<vsr", "Uniform replay (VSR w/o scoring) is worse than σ̂-weighted VSR", "accuracy",
          "vsr_no_scoring", "vsr", "lower", "VSR Figure 6; Appendix D.5 Qwen2.5-1.5B BabyAI runs", _babyai(),
          task="agentic", paper_effect=1 - statistics.mean(VSR_BABYAI_RUNS["uniform_gigpo"])
          / statistics.mean(VSR_BABYAI_RUNS["vsr_gigpo"])),
    Claim("VSR", "no_recency>vsr@early", "VSR w/o recency outperforms full VSR initially (early window of "
          "validation)", "val_early", "vsr_no_recency", "vsr", "higher",
          "VSR ablation paragraphs (Figure 6): 'outperforms full VSR initially'", task="agentic"),
    Claim("VSR", "no_recency_plateaus", "... but plateaus thereafter: its validation gain from the early to the "
          "late window is smaller than full VSR's", "val_gain", "vsr_no_recency", "vsr", "lower",
          "VSR ablation paragraphs (Figure 6): 'but plateaus thereafter'", task="agentic"),
    # ---- VIGOR (math; Table 1 avg over six benchmarks, best checkpoint, one run per cell)
    *(Claim("VIGOR", f"vigor_rollouts<{o}", f"VIGOR reaches {o}'s accuracy with fewer rollouts",
            "rollouts_to_target", "vigor", o, "lower",
            "VIGOR Figure 1 (right) and Section 5.2; Appendix A Figure 6 (other models)",
            "up to 2.3x fewer rollouts to the target (Qwen2.5-3B), over GRPO, GRESO and RL-ZVP", task="math")
      for o in ("grpo", "greso", "rl_zvp")),
    *(Claim("VIGOR", f"vigor>{o}", f"VIGOR beats {name} in accuracy at a matched rollout budget", "accuracy",
            "vigor", o, "higher", "VIGOR Table 1 (avg column, all four models); Section 5.2",
            _vigor("vigor", o), task="math", paper_effect=_vigor_rel("vigor", o))
      for o, name in (("grpo", "GRPO"), ("greso", "GRESO-r"), ("rl_zvp", "RL-ZVP"))),
    # the text gives curves only ("VIGOR consistently achieves the best performance"), no numbers
    *(Claim("VIGOR", f"vigor>{m}", f"Variance-based selection beats {what} selection at the same budget",
            "accuracy", "vigor", m, "higher", "VIGOR Section 5.3 (Analysis and Ablation Study), Figure 5 (left), "
            "Qwen2.5-3B", task="math")
      for m, what in (("vigor_random", "random"), ("vigor_difficulty", "difficulty-based"))),
    # ---- baselines as the seeds describe them
    Claim("GRESO", "greso_tokens<dapo", "GRESO generates fewer tokens per update than DAPO's dynamic sampling",
          "tokens_per_update", "greso", "dapo", "lower",
          "VIGOR Section 2 (GRESO is more efficient than DAPO); GRESO itself is not among the seeds"),
    Claim("DAPO", "dapo_tokens>grpo", "DAPO's dynamic sampling pays more generation per update than GRPO",
          "tokens_per_update", "dapo", "grpo", "higher",
          "VIGOR Sections 1-2 (DAPO's larger rollout pool: large computational overhead)"),
    Claim("RL-ZVP", "rl_zvp>grpo", "RL-ZVP beats GRPO in accuracy", "accuracy", "rl_zvp", "grpo", "higher",
          "RL-ZVP (Le et al., 2026; not among the seeds); the seeds' numbers are VIGOR Table 1's",
          _vigor("rl_zvp", "grpo"), task="math", paper_effect=_vigor_rel("rl_zvp", "grpo")),
    # ---- seed 001's allocators: the cost claims whose abstracts give a number
    Claim("PAIR", "pair_tokens<grpo", "PAIR generates fewer tokens per update than full-group GRPO",
          "tokens_per_update", "pair", "grpo", "lower", "seed 001, PAIR abstract (compute-matched RLVR runs)",
          "; ".join(f"{m}: {v:.0%} fewer generated tokens than full-group GRPO" for m, v in PAIR_TOKENS_SAVED.items()),
          paper_effect=statistics.mean(PAIR_TOKENS_SAVED.values())),
    *(Claim("SARA", f"{m}_rollouts<dapo", f"{name} generates fewer rollouts per update than dynamic sampling "
            "(DAPO's)", "rollouts_per_update", m, "dapo", "lower",
            "seed 001, SARA abstract (math reasoning and planning, 1.5B/3B models)",
            f"{SARA_ROLLOUTS_SAVED[m]:.0%} fewer rollouts than DS", paper_effect=SARA_ROLLOUTS_SAVED[m])
      for m, name in (("sara", "SARA"), ("sara_dps", "SARA composed with DPS"))),
    # ---- VIP (an AI summary of the paper: Main Findings)
    Claim("VIP", "vip>base_estimator", "VIP beats uniform allocation with the same base estimator "
          "(RLOO+VIP vs RLOO, Dr.GRPO+VIP vs Dr.GRPO)", "accuracy", "vip", "grpo", "higher",
          "VIP summary, Main Findings ('consistent improvements on Pass@32 and Mean@32 across all three "
          "base models and both rollout budgets')",
          "Qwen2.5-Math-1.5B at 8xQ: Pass@32 +12.3, Mean@32 +6.3 (RLOO+VIP minus RLOO)", task="math",
          same_estimator=True),
    Claim("VIP", "vip_gain_weaker_backbone", "VIP's relative gain is larger on the smaller backbone",
          "relative_gain_by_size", "vip", "grpo", "higher",
          "VIP summary, Main Findings ('larger for the 1.5B and 3B models than for the 7B model')",
          task="math", same_estimator=True),
)
