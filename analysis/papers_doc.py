"""Writes the generated parts of ``docs/papers.md``: the table of what the papers state against
the paper sweeps' fields (``analysis.paper_knobs``), the claims (``analysis.paper_claims``) and
the VIGOR Theorem 2 simulation (``analysis.vigor_speedup``), each between a pair of markers
``<!-- generated:NAME -->`` ... ``<!-- /generated:NAME -->``; the prose around them is kept.

    python -m analysis.papers_doc            # rewrite docs/papers.md's generated blocks
    python -m analysis.papers_doc --check    # exit 1 naming the block that is out of date
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from components.artifacts import write_atomic

DOC = Path(__file__).resolve().parents[1] / "docs" / "papers.md"


def _cell(v) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def knobs_block() -> str:
    from analysis.paper_knobs import knob_table

    rows = knob_table()
    lines = ["| sweep | field | paper's value | where | the paper states | status |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['sweep']} | `{r['field']}` | {_cell(r['value'])} | {r['where']} | {_cell(r['says'])} | {r['status']} |"
              for r in rows]
    return "\n".join(lines)


def claims_block() -> str:
    from analysis.paper_claims import CLAIMS

    lines = ["| paper | id | claim | measure | setting | source | the paper's numbers |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {c.paper} | `{c.id}` | {_cell(c.text)} | {c.kind} | {c.task or 'any'} | {_cell(c.source)} "
              f"| {_cell(c.paper_numbers or 'not in the text')} |" for c in CLAIMS]
    return "\n".join(lines)


def vigor_block() -> str:
    import contextlib
    import io

    from analysis.vigor_speedup import main

    with contextlib.redirect_stdout(io.StringIO()):
        text = main([])
    return "Printed by `python -m analysis.vigor_speedup` (fixed seed 0):\n\n" + text.strip()


BLOCKS = {"knobs": knobs_block, "claims": claims_block, "vigor-speedup": vigor_block}


def render(doc: str, names=tuple(BLOCKS)) -> str:
    for name in names:
        pat = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- /generated:{name} -->)", re.S)
        if not pat.search(doc):
            raise ValueError(f"{DOC}: no <!-- generated:{name} --> ... <!-- /generated:{name} --> block")
        body = BLOCKS[name]()
        doc = pat.sub(lambda m: m.group(1) + body + "\n" + m.group(2), doc)
    return doc


def stale_blocks(doc: str, names=tuple(BLOCKS)) -> list[str]:
    """The generated blocks whose text differs from what the generators write now."""
    return [n for n in names if render(doc, (n,)) != doc]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="write docs/papers.md's generated blocks")
    ap.add_argument("--check", action="store_true", help="only report blocks that are out of date")
    a = ap.parse_args(argv)
    doc = DOC.read_text(encoding="utf-8")
    if a.check:
        stale = stale_blocks(doc)
        if stale:
            print(f"{DOC}: out of date: {', '.join(stale)} (run python -m analysis.papers_doc)", file=sys.stderr)
            return 1
        return 0
    new = render(doc)
    write_atomic(DOC, new)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
