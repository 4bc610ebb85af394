"""``arith_levels``: the embedded task's unfiltered benchmark (its MATH500).

The papers train on a hard subset and judge on standard benchmarks that span every difficulty
(VSR §5: AIME24/25, AMC23, OlympiadBench, MATH500, Minerva). The embedded sweeps' held-out
set is the hard subset only, where every method sits near zero; this is the other measure: a
fixed set of synthetic chains, the same number at every level of the task
(``MIN_LEVEL``..``MAX_LEVEL`` terms, 1-digit operands), never filtered by any policy.

Versioned as a generator spec, not a file: ``SPEC`` fixes the draw, and ``load`` checks the
content digest of what it drew against ``DIGEST`` -- a change to the generator (or to the
spec) fails loudly instead of silently changing the benchmark; a deliberate change bumps
``SPEC["version"]`` and ``DIGEST`` together. Problems are interleaved by level, so the first
``k * levels`` of them (``evaluate``'s ``max_problems``) hold ``k`` of every level.

Disjointness: the draw uses its own seeds, and ``evaluate`` refuses to score a policy on it
when any of its problems is in the hard input's training file (``check_disjoint``). Level 2
has only 162 distinct chains and level 3 2,916, so the easy levels overlap a pretraining set
of thousands of easy chains by construction -- as a real base model has seen easy problems;
the RL training pools (levels 5-8 in the sweeps) are what must stay apart.
"""
from __future__ import annotations

import hashlib
import json

from components.data.schema import Problem
from components.data.synthetic import MAX_LEVEL, MIN_LEVEL, generate_problems

NAME = "arith_levels"
SPEC = {"version": 1, "levels": list(range(MIN_LEVEL, MAX_LEVEL + 1)), "per_level": 150,
        "operand_digits": 1, "seed_base": 29_000}
DIGEST = "7f900ce39ec9ed17dfb406d8f2ec76f62082c06acffa3a2b6c989b3ef889b20a"


def draw(spec: dict = SPEC) -> list[Problem]:
    """The benchmark's problems for ``spec``: ``per_level`` distinct chains per level,
    interleaved level by level (2, 3, ..., 8, 2, 3, ...)."""
    by_level = [generate_problems(spec["per_level"], [lv], seed=spec["seed_base"] + lv,
                                  operand_digits=spec["operand_digits"], source=f"{NAME}-v{spec['version']}")
                for lv in spec["levels"]]
    return [p for row in zip(*by_level) for p in row]


def digest(problems: list[Problem]) -> str:
    """sha256 of the problems' (uid, prompt, answer, level) in order."""
    h = hashlib.sha256()
    for p in problems:
        h.update(json.dumps([p.uid, p.prompt, p.answer, p.level]).encode() + b"\n")
    return h.hexdigest()


def load() -> list[Problem]:
    """The pinned benchmark; raises when the draw no longer matches ``DIGEST``."""
    problems = draw(SPEC)
    got = digest(problems)
    if got != DIGEST:
        raise ValueError(f"{NAME} v{SPEC['version']}: content digest {got[:16]} differs from the pinned "
                         f"{DIGEST[:16]} (components/data/arith_benchmark.py DIGEST): the synthetic generator "
                         "changed; a new benchmark needs a new SPEC version and DIGEST")
    return problems


def check_disjoint(problems: list[Problem], trained: list[Problem], where: str) -> None:
    """Raise when a benchmark problem is among the ``trained`` ones (read from ``where``)."""
    shared = sorted({p.uid for p in problems} & {p.uid for p in trained})
    if shared:
        raise ValueError(f"{where}: {len(shared)} training problems are in the {NAME} benchmark "
                         f"({', '.join(shared[:3])}{', ...' if len(shared) > 3 else ''}): it must stay held out")
