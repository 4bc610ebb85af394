"""README.md and the docs/ pages keep no number a script does not print.

Counts come from generated blocks (``scripts/readme_tables.py``: the method list from the
registries, the bad-input corpus from its files, the result tables from the sweeps' tables
runs); this file checks what prose may still carry: the stage table against the stage graph,
no timing, size or ratio outside a generated block or code, no history, links that resolve.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from components import stage_graph

REPO = Path(__file__).resolve().parents[2]
# every page a reader is sent to: the README and each topic page under docs/
PAGES = ["README.md"] + sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))
# blocks a script writes: scripts/readme_tables.py's (rlvr:NAME), a page generator's (generated:NAME), a bench's (bench:NAME)
GENERATED = re.compile(r"<!-- (?P<k>rlvr|generated|bench):(?P<n>[A-Za-z0-9_.-]+) -->\n.*?<!-- /(?P=k):(?P=n)[^>]*-->", re.S)
FENCED = re.compile(r"```.*?```", re.S)
INLINE = re.compile(r"`[^`\n]*`")
MEASUREMENT = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|sec|seconds?|min|minutes?|h|hours?|GB|GiB|MB|KB|%|x"
                         r"|tokens/s)(?![\w])")
HISTORY = [re.compile(p) for p in (r"\b20\d\d-\d\d-\d\d\b", r"(?i)\bcommit\s+[0-9a-f]{7,}\b", r"(?i)first attempt",
                                   r"(?i)this round", r"(?i)git archive", r"(?i)\bbefore the refactor",
                                   r"(?i)\bearlier code\b", r"(?i)\bno longer\b")]


def prose(page: str) -> str:
    """The page without generated blocks, fenced code and inline code."""
    text = GENERATED.sub("", (REPO / page).read_text())
    return INLINE.sub("", FENCED.sub("", text))


def test_readme_is_short():
    n = len((REPO / "README.md").read_text().splitlines())
    assert n <= 250, f"README.md: {n} lines (at most 250; topics go to docs/)"


def test_readme_stage_table_is_the_stage_graph():
    text = (REPO / "README.md").read_text()
    table = text.split("## What the demo shows", 1)[1].split("\n\n| stage |", 1)[1].split("\n\n", 1)[0]
    names = re.findall(r"(?m)^\| `(\w+)` \|", table)
    assert names == [s.name for s in stage_graph.STAGES], names


@pytest.mark.parametrize("page", PAGES)
def test_no_typed_measurement_in_prose(page):
    found = [(m.group(0), prose(page)[max(m.start() - 40, 0):m.end() + 10].replace("\n", " "))
             for m in MEASUREMENT.finditer(prose(page))]
    assert not found, f"{page}: timings, sizes and ratios belong in a generated block or a bench: {found}"


@pytest.mark.parametrize("page", PAGES)
def test_no_history_in_prose(page):
    text = prose(page)
    found = [m.group(0) for p in HISTORY for m in p.finditer(text)]
    assert not found, f"{page}: history belongs in the git log and the run card: {found}"


def _links():
    out = []
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", FENCED.sub("", (REPO / page).read_text())):
            if "://" not in target:
                out.append((page, (Path(page).parent / target).as_posix() if target else page, anchor))
    return sorted(set(out))


def anchors(page: Path) -> Iterator[str]:
    """The heading anchors GitHub gives a page: lower case, punctuation but ``-`` and ``_``
    dropped, spaces to hyphens, ``-1``, ``-2`` after a repeated heading."""
    seen: dict[str, int] = {}
    for title in re.findall(r"(?m)^#{1,6} (.+)$", FENCED.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


@pytest.mark.parametrize("page,target,anchor", _links())
def test_links_resolve(page, target, anchor):
    path = (REPO / target).resolve()
    assert path.exists(), f"{page}: link to {target} does not resolve"
    if anchor and path.suffix == ".md":
        assert anchor in set(anchors(path)), f"{page}: link to {target}#{anchor}: no such heading there"


def test_anchors_follow_githubs_rule(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# The VIP core study (`study_vip_core.yaml`)\n## Notes\n```\n# not a heading\n```\n## Notes\n")
    assert list(anchors(page)) == ["the-vip-core-study-study_vip_coreyaml", "notes", "notes-1"]


def test_measurement_pattern_catches_the_kinds_it_names():
    text = "takes about 2 min once; 1.33x; 25 s; 6.8 GB; 98 % cut; 8,572 tokens/s"
    assert [m.group(0) for m in MEASUREMENT.finditer(text)] == ["2 min", "1.33x", "25 s", "6.8 GB", "98 %",
                                                                "8,572 tokens/s"]
    assert not MEASUREMENT.findall("Sokoban 6x6, Python 3.11, mean@16, 7B models, uid 1000, v2")


WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


def _section_seed_claims():
    """(section title, sweep, seeds the prose claims) for docs/results.md's sweep sections and
    the README's sentence on the demo."""
    out = []
    for sec in (REPO / "docs" / "results.md").read_text().split("\n## ")[1:]:
        sweeps = sorted(set(re.findall(r"<!-- rlvr:([A-Za-z0-9_]+) -->", sec)))
        for word in re.findall(r"(?<!at least )\b(one|two|three|four|five|six) training seeds?\b",
                               INLINE.sub("", GENERATED.sub("", sec))):
            out += [(sec.splitlines()[0], s, WORDS[word]) for s in sweeps]
    readme = prose("README.md")
    out += [("README", "demo", WORDS[w]) for w in re.findall(r"The demo trains (\w+) seeds?", readme)]
    return out


@pytest.mark.parametrize("title,sweep,seeds", _section_seed_claims())
def test_seed_counts_in_prose_are_the_sweep_files(title, sweep, seeds):
    from components.sweep import load_sweep

    assert len(load_sweep(REPO / "dags" / "sweeps" / f"{sweep}.yaml").seeds) == seeds, (title, sweep)


def test_seed_claims_are_found():
    assert {s for _, s, _ in _section_seed_claims()} >= {"demo", "fidelity", "allocators_smoke", "agentic"}
    assert {"README.md", "docs/results.md", "docs/methods.md", "docs/services.md"} <= set(PAGES)
