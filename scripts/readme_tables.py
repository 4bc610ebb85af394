"""Write the generated blocks of README.md and docs/ from their sources, or check them.

A block is the text between ``<!-- rlvr:NAME -->`` and ``<!-- /rlvr:NAME sha256:DIGEST -->``:

- ``rlvr:facts.X`` is written from the repository itself (``FACTS``): the method list from the
  method registries, the bad-input corpus sizes from the corpus files;
- ``rlvr:power.SWEEP`` holds the power calculation (``analysis/power.py``) on the evaluate
  results behind sweep SWEEP's latest finished ``tables`` run (a study's pilot);
- ``rlvr:analyses.SWEEP`` holds the papers' analyses of sweep SWEEP (``analyses.md`` of its latest
  finished ``tables`` run: ``stages.tables.analyses``), its plots copied to
  ``docs/plots/SWEEP/`` and linked relative to ``docs/`` (the block sits in a page there);
- ``rlvr:summary.verdicts`` lists every study's verdicts on its judged set, read from the study
  blocks (``rlvr:study_*``, pilots left out) after they are filled;
- any other ``rlvr:SWEEP`` holds the ``tables.md`` and ``claims.md`` of sweep SWEEP's latest
  finished ``tables`` stage run in $RLVR_HOME (the files ``rlvr tables SWEEP`` prints).

The end marker carries the digest of the body it closes, so a hand edit inside a block is
found even where the sweep's store is absent. Nothing in a block is typed by hand.

    RLVR_HOME=... .venv/bin/python scripts/readme_tables.py [FILE ...]    (default: DOCS)
    ... --check    exit 1 if a block is stale or edited: facts against their sources, sweeps
                   against their tables run, or, where $RLVR_HOME has none, against the digest
    ... --check --require-runs    a sweep block without a tables run is an error too
    ... --only demo,facts.methods    fill / check only these blocks

A sweep block whose sweep has no finished tables run stops a fill with one line naming the
file, block and sweep; no file is written unless every block of every file could be filled.
"""
from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

from components.artifacts import write_atomic

REPO = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/results.md")

NAME = r"[A-Za-z0-9_.-]+"
BLOCK = re.compile(rf"(<!-- rlvr:(?P<name>{NAME}) -->\n)(?P<body>.*?)<!-- /rlvr:(?P=name)(?: sha256:(?P<digest>[0-9a-f]+))? -->",
                   re.S)


def digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def blocks(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def bodies_of(text: str) -> dict[str, tuple[str, str | None]]:
    """name -> (body, digest recorded in its end marker or None)."""
    return {m.group("name"): (m.group("body"), m.group("digest")) for m in BLOCK.finditer(text)}


def fill(text: str, bodies: dict[str, str]) -> str:
    """``text`` with each block's body replaced by ``bodies[name]`` and its end marker stamped
    with the body's digest (a block whose name is not in ``bodies`` is left as it is)."""
    opened = re.findall(rf"<!-- rlvr:({NAME}) -->", text)
    if sorted(opened) != sorted(blocks(text)):
        unclosed = sorted(set(opened) - set(blocks(text)))
        raise ValueError(f"block {unclosed[0] if unclosed else opened[0]!r} has no matching <!-- /rlvr:... --> end marker")

    def one(m: re.Match) -> str:
        name = m.group("name")
        if name not in bodies:
            return m.group(0)
        body = bodies[name].rstrip("\n") + "\n"
        return f"{m.group(1)}{body}<!-- /rlvr:{name} sha256:{digest(body)} -->"
    return BLOCK.sub(one, text)


# ---- facts: blocks written from the repository ----

def methods_fact() -> str:
    """Every registered method, by the tasks it applies to, from the one registry (what a sweep's
    ``methods`` accepts on each task)."""
    from components.methods import registry

    m, e = registry.available("math"), registry.available("agentic")
    return (f"**{len(m)} methods on math tasks** and **{len(e)} on multi-turn episodes**, one module each "
            f"under `components/methods/`, registered by name in `components/methods/registry.py`. "
            f"Math: {', '.join(f'`{n}`' for n in m)}. Episodes: {', '.join(f'`{n}`' for n in e)}.\n")


def bad_input_fact() -> str:
    """The sizes of the bad-input corpus, counted from its files."""
    import ast

    import yaml

    corpus = REPO / "tests" / "bad_input" / "corpus"
    outputs = sum(1 for x in (corpus / "grader_outputs.jsonl").read_text().splitlines() if x.strip())
    rows = sum(1 for x in (corpus / "data_rows.jsonl").read_text().splitlines() if x.strip())
    sweeps = sum(1 for d in yaml.safe_load_all((corpus / "sweep_files.yaml").read_text()) if d)
    tree = ast.parse((REPO / "tests" / "bad_input" / "test_paths.py").read_text())
    paths = sum(1 for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"))
    total = outputs + rows + sweeps + paths
    return (f"{total} malformed inputs: {outputs} model outputs (`grader_outputs.jsonl`), {rows} dataset "
            f"rows (`data_rows.jsonl`), {sweeps} sweep files (`sweep_files.yaml`), {paths} path cases "
            f"(`test_paths.py`)\n")


FACTS = {"facts.methods": methods_fact, "facts.bad_input": bad_input_fact}


# ---- the verdicts of every study, read from the study blocks themselves ----

VERDICTS_BLOCK = "summary.verdicts"
JUDGED = re.compile(r"^#### Pre-registered claims on (\S+) \(the judged set\)\n", re.M)
NUM = r"[+-]?[0-9.]+(?:e[+-]?[0-9]+)?"
INTERVAL = re.compile(rf"^{NUM} \[({NUM}), ({NUM})\]$")
PAPER_EFFECT = re.compile(rf"^({NUM}) \(")


def sized(interval: str, paper_effect: str) -> str:
    """The done-when of a study's accuracy claim: the interval's half-width against half the
    paper's effect scaled to the study ("" where the paper gives no number)."""
    m, p = INTERVAL.match(interval), PAPER_EFFECT.match(paper_effect)
    if m is None or p is None:
        return ""
    half, target = (float(m.group(2)) - float(m.group(1))) / 2, abs(float(p.group(1))) / 2
    return f"{half:.3g} {'≤' if half <= target else '>'} {target:.3g}"


def verdicts_summary(texts: dict[str, str]) -> str:
    """One row per (claim, study): the verdict each study block prints on its judged set. Pilots
    (regime searches) are left out; every cell is copied from a generated block."""
    from analysis.paper_claims import CLAIMS

    order = {c.text: (i, c.id) for i, c in enumerate(CLAIMS)}
    rows = []
    for text in texts.values():
        for name, (body, _) in bodies_of(text).items():
            if not name.startswith("study_") or "pilot" in name:
                continue
            m = JUDGED.search(body)
            if m is None:
                continue
            for line in body[m.end():].split("\n\n", 2)[1].splitlines()[2:]:
                cells = [x.strip() for x in line.strip().strip("|").split("|")]
                if len(cells) < 7 or cells[1] not in order:
                    raise ValueError(f"block rlvr:{name}: claims row not understood: {line[:80]}")
                rank, cid = order[cells[1]]
                accuracy = cells[5].startswith("mean@k")
                measure = f"{cells[5]} on {m.group(1)}" if accuracy else cells[5]
                size = sized(cells[3], cells[4]) if accuracy else ""
                rows.append((rank, name, cells[2].strip("*"), size,
                             f"| `{cid}` | {cells[0]} | `{name}` | {cells[2]} | {cells[3]} | {cells[4]} "
                             f"| {size} | {measure} | {cells[6]} |"))
    if not rows:
        raise LookupError("no study block with a judged-set claims table")
    verdicts = [r[2] for r in rows]
    counts = ", ".join(f"{k}: {verdicts.count(k)}" for k in
                       ("supported", "contradicted", "smaller than the paper's effect", "inconclusive") if k in verdicts)
    sizes = [r[3] for r in rows if r[3]]
    return ("| claim | paper | study | verdict | effect [95% CI] | paper's effect here | half-width vs half the "
            "paper's effect | measure | seeds |\n"
            "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(r[4] for r in sorted(rows)) +
            f"\n\n{len(rows)} verdicts from {len({r[1] for r in rows})} studies: {counts}. Accuracy verdicts "
            f"with a paper number whose interval's half-width is at most half the paper's effect: "
            f"{sum('≤' in x for x in sizes)} of {len(sizes)}.\n")


# ---- sweeps: blocks written from a sweep's tables run ----

def tables_run(name: str):
    """The sweep's latest FINISHED tables run, and a reader of its files' bytes (its local
    output, else its MLflow artifact)."""
    from components import lineage, tracking

    try:
        run = tracking.latest_tables_run(name)
    except LookupError as e:
        raise LookupError(f"{e} (run: rlvr sweep dags/sweeps/{name}.yaml)") from None
    out = Path(run.data.tags.get("rlvr.output_uri", "/nonexistent"))

    def read(f: str) -> bytes:
        p = out / f if (out / f).is_file() else Path(lineage.client().download_artifacts(run.info.run_id, f))
        return p.read_bytes()
    return run, read


def sweep_tables(name: str) -> str:
    """tables.md + claims.md of the sweep's latest FINISHED tables run, with its provenance."""
    run, read = tables_run(name)
    parts = []
    for f in ("tables.md", "claims.md"):
        text = _demote(read(f).decode())
        if not any(text in x for x in parts):  # a pre-registered sweep's tables.md already ends with claims.md
            parts.append(text)
    how = (f"*Printed by `rlvr sweep dags/sweeps/{name}.yaml` (then `rlvr tables {name}`); "
           f"written here by `scripts/readme_tables.py` from its tables run, never typed; "
           f"{provenance(run.data.tags)}.*\n")
    return how + "\n" + "\n".join(parts)


def provenance(tags: dict[str, str]) -> str:
    """The commit and CPU the tables run was computed at (every stage it reads is a cache entry
    whose key holds that stage's code fingerprint, so the same commit on the same kind of CPU
    recomputes the same inputs; another CPU rounds some sums differently)."""
    on = f" on `{tags['rlvr.cpu']}`" if tags.get("rlvr.cpu") else ""
    if commit := tags.get("mlflow.source.git.commit"):
        return f"computed at commit `{commit[:10]}`{on}"
    return f"commit not recorded (tables code fingerprint `{tags.get('rlvr.code', '')[:12]}`){on}"


def _demote(md: str) -> str:
    # the stage's "## " titles become "#### " so they sit under the page's own sections
    return re.sub(r"(?m)^## ", "#### ", md)


def power_tables(name: str) -> str:
    """The power calculation on the evaluate results behind the sweep's latest tables run."""
    from analysis.power import PROBLEM_COUNTS, power_markdown, results_task, sweep_results

    run, _ = tables_run(name)
    how = (f"*Printed by `python -m analysis.power {name}`; written here by `scripts/readme_tables.py`, never "
           f"typed; from the evaluate results of the sweep's tables run, {provenance(run.data.tags)}.*\n")
    results = sweep_results(name)
    return how + "\n" + _demote(power_markdown(results, PROBLEM_COUNTS[results_task(results)]))


PLOTS = REPO / "docs" / "plots"
IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<file>analysis_[A-Za-z0-9_]+\.png)\)")


def analyses_tables(name: str) -> tuple[str, dict[Path, bytes]]:
    """The papers' analyses of the sweep's latest tables run, and its plots ({docs path: bytes})."""
    run, read = tables_run(name)
    try:
        md = read("analyses.md").decode()
    except Exception as e:  # noqa: BLE001 -- mlflow raises its own types for a missing artifact
        raise LookupError(f"sweep {name}: its latest tables run has no analyses.md (set stages.tables.analyses): "
                          f"{str(e).splitlines()[0][:200]}") from None
    files = {PLOTS / name / m.group("file"): read(m.group("file")) for m in IMAGE.finditer(md)}
    md = IMAGE.sub(lambda m: f"![{m.group('alt')}](plots/{name}/{m.group('file')})", md)
    # under the page's "## Paper analyses": the stage's own title goes, every heading one level down
    md = re.sub(r"(?m)^(#{2,5}) ", r"#\1 ", re.sub(r"\A## Paper analyses\n+", "", md))
    how = (f"*Printed by `rlvr sweep dags/sweeps/{name}.yaml` (then `rlvr tables {name}`); written here by "
           f"`scripts/readme_tables.py` from its tables run's `analyses.md`, plots copied to `docs/plots/{name}/`, "
           f"never typed; {provenance(run.data.tags)}.*\n")
    return how + "\n" + md, files


def source(name: str) -> tuple[str, dict[Path, bytes]]:
    """(body, files beside the page the block needs) of block ``name``."""
    if name in FACTS:
        return FACTS[name](), {}
    if name.startswith("analyses."):
        return analyses_tables(name[len("analyses."):])
    return (power_tables(name[len("power."):]) if name.startswith("power.") else sweep_tables(name)), {}


def check(texts: dict[str, str], names: list[str], require_runs: bool) -> int:
    problems, by_digest = [], []
    for n in names:
        where = [f for f, t in texts.items() if n in blocks(t)]
        try:
            want, files = (verdicts_summary(texts), {}) if n == VERDICTS_BLOCK else source(n)
            want = want.rstrip("\n") + "\n"
            problems += [f"{f.relative_to(REPO)}: plot of block rlvr:{n} is {'stale' if f.is_file() else 'missing'} "
                         "(rerun scripts/readme_tables.py)" for f, data in files.items()
                         if not f.is_file() or f.read_bytes() != data]
        except LookupError as e:
            if require_runs:
                problems.append(f"{', '.join(where)}: block rlvr:{n}: {e}")
                continue
            want = None
        for f in where:
            body, recorded = bodies_of(texts[f])[n]
            if want is not None and body != want:
                problems.append(f"{f}: block rlvr:{n} is stale (rerun scripts/readme_tables.py)")
            elif want is None and recorded != digest(body):
                problems.append(f"{f}: block rlvr:{n}: body does not match its end marker's digest "
                                f"(edited by hand, or never written by this script)")
            elif want is None:
                by_digest.append(n)
    for p in problems:
        print(p, file=sys.stderr)
    if by_digest:
        print(f"checked against their digest only (no tables run in this RLVR_HOME): {', '.join(sorted(set(by_digest)))}",
              file=sys.stderr)
    print(f"{len(problems)} problem(s) in {len(names)} block(s)" if problems else f"{len(names)} block(s) up to date",
          file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", default=[str(REPO / f) for f in DOCS])
    ap.add_argument("--check", action="store_true", help="exit 1 if a block is stale or edited by hand")
    ap.add_argument("--require-runs", action="store_true", help="with --check: a sweep without a tables run fails")
    ap.add_argument("--only", default="", help="comma-separated block names (default: every block)")
    args = ap.parse_args(argv)
    texts = {f: Path(f).read_text() for f in args.files}
    names = sorted({n for t in texts.values() for n in blocks(t)})
    only = [n for n in args.only.split(",") if n]
    if only:
        if missing := sorted(set(only) - set(names)):
            print(f"--only: no block rlvr:{missing[0]} in {', '.join(texts)}", file=sys.stderr)
            return 2
        names = sorted(only)
    for f, t in texts.items():
        try:
            fill(t, {})
        except ValueError as e:
            print(f"{f}: {e}", file=sys.stderr)
            return 2
    if args.check:
        return check(texts, names, args.require_runs)
    bodies, files = {}, {}
    for n in names:
        if n == VERDICTS_BLOCK:   # read from the other blocks once they are filled (below)
            continue
        try:
            bodies[n], more = source(n)
            files.update(more)
        except LookupError as e:
            where = ", ".join(f for f, t in texts.items() if n in blocks(t))
            print(f"{where}: block rlvr:{n}: {e}", file=sys.stderr)
            return 2
    new = {f: fill(t, bodies) for f, t in texts.items()}
    if any(VERDICTS_BLOCK in blocks(t) for t in new.values()):
        summary = {VERDICTS_BLOCK: verdicts_summary(new)}
        new = {f: fill(t, summary) for f, t in new.items()}
    changed = [f for f in texts if new[f] != texts[f]]
    for f in changed:
        write_atomic(f, new[f])
    for f, data in files.items():
        if not f.is_file() or f.read_bytes() != data:
            write_atomic(f, data)
            changed.append(str(f.relative_to(REPO)))
    print(f"filled {len(names)} block(s) ({', '.join(names) or 'none'}); changed: {', '.join(changed) or 'nothing'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
