"""The result blocks of docs/results.md agree wherever two sweeps share a cell.

Sweeps share training and evaluation cells through the cache (a cache key holds no sweep
name), and the studies were run on different stores, in different sessions: a row of one
block (an eval set and a method over the same cells) must then read the same in every block
that has it. Cells are matched by the stage graph's dry walk (a key from each call's stage,
params and inputs, chained through its upstream calls), so the check needs no store.
"""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from components import stage_graph
from components.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- rlvr:([\w.]+) -->\n(.*?)<!-- /rlvr:\1 ", re.S)
# the CPU a block's header names (blocks whose tables run recorded it, `rlvr.cpu`)
CPU = re.compile(r"computed at commit `\w+` on `([^`]+)`")

# Blocks computed on an earlier version of the stages (the held-out band's prompts and the
# base policy's evaluation differ there): a rerun on this code prints other rows. results.md
# says so beside them.
EARLIER_STAGES = {"sanity", "sanity_long", "study_pilot", "study_pilot_epochs", "study_pilot_lr",
                  "study_pilot_long", "study_pilot3"}
# Pairs of blocks computed from the same code and cache keys in different sessions, each on
# its session's machine, whose rows differ. The later block's pretrain, filter and base-policy evaluation reproduce bit for bit
# (the same artifact digests) on a fresh store of its machine, so the difference lies with the
# machine, not with a run-to-run effect; one flipped float changes a sampled episode from then
# on. results.md says so beside them.
# The recency study ran on the core study's machine and store: it agrees with the core block.
# The BabyAI long arm's base row: its machine ran the demo at the README block's commit and at
# the long arm's code to the same tables, neither matching that block from the earlier machine.
# Blocks whose headers name their CPU need no entry: two that name different CPUs are not
# compared (the `rlvr.cpu` tag records what these pairs were found to be by hand).
# The RL-ZVP arm, the selection ablation and the DAPO/GRESO cost studies (one store, one machine)
# name their CPU; the math studies before the tag do not. Their base policy's arith_levels row
# differs from those studies', as the demo's tables do between this machine and the one of the
# README block before it (the same code, two machines).
MATH_BEFORE_THE_TAG = ("study_pair", "study_sara_core", "study_sara_dps", "study_vigor_core", "study_vip_core",
                       "study_vsr", "study_vsr_core")
OTHER_MACHINE = {frozenset({"study_agentic_core", "study_agentic_scoring"}),
                 frozenset({"study_agentic_recency", "study_agentic_scoring"}),
                 frozenset({"agentic_babyai_diag", "agentic_babyai_diag_long"}),
                 *(frozenset({tagged, name}) for name in MATH_BEFORE_THE_TAG
                   for tagged in ("study_vigor_zvp", "study_vigor_selection", "study_dapo_greso_tokens",
                                  "study_greso_adaptive_tokens"))}


def accuracy_rows(body: str) -> dict[tuple[str, str], dict[str, str]] | None:
    """(eval set, method) -> the row's cells, from the block's accuracy table; the Δ column
    is left out (it depends on the block's reference method)."""
    lines = body.splitlines()
    at = next((i for i, l in enumerate(lines) if l.startswith("#### Accuracy and token cost")), None)
    if at is None:
        return None
    table = list(itertools.takewhile(lambda l: l.startswith("|"), lines[at + 2:]))
    head = [c.strip() for c in table[0].strip("|").split("|")]
    rows = {}
    for line in table[2:]:
        row = dict(zip(head, (c.strip() for c in line.strip("|").split("|"))))
        rows[(row.get("eval_set", "heldout"), row["method"])] = {k: v for k, v in row.items() if not k.startswith("Δ")}
    return rows


def evaluation_cells(sweep_file: Path) -> dict[tuple[str, str], frozenset[str]]:
    """(eval set, method) -> the dry keys of the evaluate calls behind that row."""
    made, _ = stage_graph.walk(load_sweep(sweep_file), stage_graph.dry_result)
    method = {c["extra"]["key"]: c["extra"]["method"] for c in made if c["stage"] == "train"}
    cells: dict[tuple[str, str], set[str]] = {}
    for c in made:
        if c["stage"] == "evaluate":
            cell, _, benchmark = c["extra"]["label"].partition("@")
            name = method.get(cell) or ("base" if cell.endswith("-base") else cell)
            cells.setdefault((benchmark or "heldout", name), set()).add(stage_graph.dry_result(c)["cache_key"])
    return {k: frozenset(v) for k, v in cells.items()}


def block_cpus() -> dict[str, str | None]:
    return {name: (m.group(1) if (m := CPU.search(body)) else None)
            for name, body in BLOCK.findall((ROOT / "docs" / "results.md").read_text())}


def other_machine(a: str, b: str, cpus: dict[str, str | None]) -> bool:
    if cpus.get(a) and cpus.get(b):
        return cpus[a] != cpus[b]
    return frozenset((a, b)) in OTHER_MACHINE


def shared_rows() -> list[tuple[str, str, tuple[str, str], dict, dict]]:
    blocks = {}
    for name, body in BLOCK.findall((ROOT / "docs" / "results.md").read_text()):
        sweep_file = ROOT / "dags" / "sweeps" / f"{name}.yaml"
        rows = accuracy_rows(body)
        if sweep_file.exists() and rows:
            blocks[name] = (rows, evaluation_cells(sweep_file))
    out = []
    for a, b in itertools.combinations(sorted(blocks), 2):
        (rows_a, cells_a), (rows_b, cells_b) = blocks[a], blocks[b]
        for row in sorted(rows_a.keys() & rows_b.keys()):
            if row in cells_a and cells_a[row] == cells_b.get(row):
                out.append((a, b, row, rows_a[row], rows_b[row]))
    return out


@pytest.fixture(scope="module")
def pairs():
    return shared_rows()


def test_blocks_on_this_code_agree_on_every_shared_cell(pairs):
    cpus = block_cpus()
    current = [p for p in pairs if not {p[0], p[1]} & EARLIER_STAGES and not other_machine(p[0], p[1], cpus)]
    assert len({(a, b) for a, b, *_ in current}) >= 10, "too few blocks share a cell for the check to mean much"
    for a, b, row, ra, rb in current:
        differ = differing(ra, rb)
        assert not differ, f"docs/results.md: blocks {a} and {b} share the cells of {row} but print {differ}"


def differing(ra: dict, rb: dict) -> dict:
    return {c: (ra[c], rb[c]) for c in ra.keys() & rb.keys() if ra[c] != rb[c]}


def test_the_blocks_named_as_earlier_still_differ_from_another(pairs):
    # a block rerun on this code agrees with the others and leaves EARLIER_STAGES
    for name in sorted(EARLIER_STAGES):
        assert any(name in (a, b) and differing(ra, rb) for a, b, _, ra, rb in pairs), \
            f"{name}: no shared cell differs from another block's; remove it from EARLIER_STAGES"


def test_a_block_header_names_its_cpu_where_recorded():
    cpus = block_cpus()
    assert other_machine("x", "y", {"x": "cpu A", "y": "cpu B"})
    assert not other_machine("x", "y", {"x": "cpu A", "y": "cpu A"})
    assert other_machine(*sorted(next(iter(OTHER_MACHINE))), {})
    assert all(c is None or ", flags " in c for c in cpus.values())


def test_the_pairs_named_as_other_machine_still_differ(pairs):
    # a rerun of one of them on the other's machine agrees and leaves OTHER_MACHINE
    for pair in OTHER_MACHINE:
        assert any(frozenset((a, b)) == pair and differing(ra, rb) for a, b, _, ra, rb in pairs), \
            f"{sorted(pair)}: no shared cell differs; remove the pair from OTHER_MACHINE"
