"""docs/papers.md's generated blocks are what analysis/papers_doc.py writes now."""
from __future__ import annotations

import pytest

from analysis import papers_doc


def test_generated_blocks_are_up_to_date():
    doc = papers_doc.DOC.read_text(encoding="utf-8")
    assert papers_doc.stale_blocks(doc) == [], "run: python -m analysis.papers_doc"


def test_a_stale_or_missing_block_is_named():
    doc = papers_doc.DOC.read_text(encoding="utf-8")
    edited = doc.replace("| vigor_table1 | `models` |", "| vigor_table1 | `modelz` |", 1)
    assert edited != doc and papers_doc.stale_blocks(edited, ("knobs", "claims")) == ["knobs"]
    with pytest.raises(ValueError, match="generated:claims"):
        papers_doc.render(doc.replace("<!-- generated:claims -->", ""), ("claims",))
