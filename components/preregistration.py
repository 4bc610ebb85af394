"""The pre-registration of a claims study: a ``preregistration:`` block in its sweep file,
committed before the sweep runs (git's commit order is the record that it came first).

It states what the study is -- regime, methods, seeds, updates, evaluation sets and sizes,
the claims under test, the analysis, the stopping rule and the paper effects the fourth
verdict uses -- and the sweep is validated against it, so a block that no longer describes
its sweep (a seed added, the updates changed after a look at a result) is refused at load
with one line naming the field. The tables stage prints it beside the verdicts, and judges
the claims it lists on its ``primary`` set. The protocol: docs/studies.md.

Light: pydantic only here; the claim list comes from ``analysis.paper_claims`` (no pandas).
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from components.error_text import FieldError

WHERE = "preregistration"
# a paper effect is written with this many decimals and must match analysis.paper_claims
EFFECT_DECIMALS = 4


class Preregistration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1)
    regime: str = Field(min_length=1, description="model, data, band, budgets: what is fixed and why")
    methods: list[str] = Field(min_length=1, description="the sweep's methods, plus base when it is compared")
    seeds: int = Field(ge=1, description="training seeds")
    updates: int = Field(ge=1, description="policy updates per run (stages.train.steps)")
    eval_sets: dict[str, int] = Field(min_length=1, description="evaluation set -> problems")
    primary: str = Field(description="the evaluation set the claims are judged on")
    protocol: str = Field(min_length=1, description="samples per problem, temperature, mean@k / pass@k")
    claims: list[str] = Field(description="ids of analysis.paper_claims.CLAIMS under test")
    analysis: str = Field(min_length=1)
    stopping_rule: str = Field(min_length=1)
    paper_effects: dict[str, float] = Field(default_factory=dict,
                                            description="claim id -> the paper's relative effect used")
    sizing: str = Field(min_length=1, description="where seeds / updates / problems come from")


def _fail(field: str, problem: str) -> None:
    raise FieldError(f"{WHERE}.{field}", problem)


def check(pre: Preregistration, sweep: Any) -> None:
    """``sweep``: the ``components.sweep.Sweep`` being validated (not imported: it imports this). Raise ``FieldError("preregistration.<field>", ...)`` where the block and its sweep differ."""
    from analysis.paper_claims import CLAIMS
    from components.data.arith_benchmark import NAME as ARITH, SPEC

    trained = set(sweep.methods)
    if set(pre.methods) - {"base"} != trained:
        _fail("methods", f"{sorted(pre.methods)} is not the sweep's methods {sorted(trained)} (plus base)")
    if pre.seeds != len(sweep.seeds):
        _fail("seeds", f"{pre.seeds} is not the sweep's {len(sweep.seeds)} seeds {sweep.seeds}")
    steps = sweep.stages.train.get("steps")
    if steps is None:
        raise FieldError("stages.train.steps", "a pre-registered sweep sets its updates explicitly")
    if pre.updates != steps:
        _fail("updates", f"{pre.updates} is not stages.train.steps {steps}")
    targets = (["heldout"] if sweep.heldout_eval else []) + list(sweep.benchmarks)
    if set(pre.eval_sets) != set(targets):
        _fail("eval_sets", f"{sorted(pre.eval_sets)} is not what the sweep evaluates on {sorted(targets)}")
    cap = sweep.stages.evaluate.get("max_problems")
    for name, n in pre.eval_sets.items():
        if name == ARITH:
            size = len(SPEC["levels"]) * SPEC["per_level"]
            want = min(size, cap) if cap else size
            if n != want:
                _fail(f"eval_sets.{name}", f"{n} problems, but the sweep scores {want}")
        elif name == "heldout":
            limits = [x for x in (cap, sweep.stages.filter_hard.get("max_heldout")) if x]
            if limits and n > min(limits):
                _fail(f"eval_sets.{name}", f"{n} problems, more than the sweep can score ({min(limits)})")
    if pre.primary not in pre.eval_sets:
        _fail("primary", f"{pre.primary!r} is not one of eval_sets {sorted(pre.eval_sets)}")
    by_id = {c.id: c for c in CLAIMS}
    task = "agentic" if any(sweep.task_of(m) for m in sweep.methods) else "math"
    for i, cid in enumerate(pre.claims):
        c = by_id.get(cid)
        if c is None:
            _fail(f"claims[{i}]", f"unknown claim {cid!r} (ids: analysis/paper_claims.py)")
        if c.task is not None and c.task != task:
            _fail(f"claims[{i}]", f"{cid!r} is the paper's claim in the {c.task} setting; this sweep is {task}")
        missing = {c.method, c.other} - set(pre.methods)
        if missing:
            _fail(f"claims[{i}]", f"{cid!r} compares {c.method} with {c.other}; not in methods: {sorted(missing)}")
    with_effect = {cid: round(by_id[cid].paper_effect, EFFECT_DECIMALS) for cid in pre.claims
                   if by_id[cid].paper_effect is not None}
    if set(pre.paper_effects) != set(with_effect):
        _fail("paper_effects", f"names {sorted(pre.paper_effects)}; the claims under test with a paper effect "
                               f"are {sorted(with_effect)}")
    for cid, v in pre.paper_effects.items():
        if round(v, EFFECT_DECIMALS) != with_effect[cid]:
            _fail(f"paper_effects.{cid}", f"{v} is not analysis.paper_claims' {with_effect[cid]}")


def markdown(pre: dict[str, Any]) -> str:
    """The block as the tables print it."""
    effects = ", ".join(f"{k} {v:+.1%}" for k, v in pre.get("paper_effects", {}).items()) or "none"
    sets = ", ".join(f"{k} ({v} problems)" for k, v in pre["eval_sets"].items())
    rows = [("question", pre["question"]), ("regime", pre["regime"]), ("methods", ", ".join(pre["methods"])),
            ("seeds", pre["seeds"]), ("updates", pre["updates"]), ("evaluation sets", sets),
            ("claims judged on", pre["primary"]), ("protocol", pre["protocol"]),
            ("claims", ", ".join(pre["claims"]) or "none"), ("analysis", pre["analysis"]),
            ("stopping rule", pre["stopping_rule"]), ("paper effects (relative)", effects),
            ("sizing", pre["sizing"])]
    return "\n".join(["## Pre-registration (committed before the run)", "", "| | |", "|---|---|",
                      *(f"| {k} | {' '.join(str(v).split())} |" for k, v in rows), ""])
