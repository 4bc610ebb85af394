"""Write the README's (and bench/RESULTS.md's) result sections from the sweeps' own tables.

Every block between ``<!-- rlvr:NAME -->`` and ``<!-- /rlvr:NAME -->`` is replaced by the
``tables.md`` and ``claims.md`` of sweep NAME's latest finished ``tables`` stage run in
$RLVR_HOME (the same files ``rlvr tables NAME`` prints), with a line saying how to reproduce
it. Nothing in those blocks is typed by hand: rerun this after the sweeps.

    RLVR_HOME=... .venv/bin/python scripts/readme_tables.py [FILE ...]     (default: README.md bench/RESULTS.md)
    ... --check    exit 1 if a file would change (the blocks are stale)
    ... --only demo,sanity    fill / check only these blocks (the others are left as they are)

A block whose sweep has no finished tables run stops the script with one line naming the
file, block and sweep; no file is written unless every block of every file could be filled.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BLOCK = re.compile(r"(<!-- rlvr:(?P<name>[A-Za-z0-9_.-]+) -->\n)(?P<body>.*?)(<!-- /rlvr:(?P=name) -->)", re.S)


def blocks(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def fill(text: str, bodies: dict[str, str]) -> str:
    """``text`` with each block's body replaced by ``bodies[name]`` (a block whose name is not
    in ``bodies`` keeps its body)."""
    opened = re.findall(r"<!-- rlvr:([A-Za-z0-9_.-]+) -->", text)
    if sorted(opened) != sorted(blocks(text)):
        unclosed = sorted(set(opened) - set(blocks(text)))
        raise ValueError(f"block {unclosed[0] if unclosed else opened[0]!r} has no matching <!-- /rlvr:... --> end marker")
    return BLOCK.sub(lambda m: m.group(0) if m.group("name") not in bodies
                     else m.group(1) + bodies[m.group("name")].rstrip("\n") + "\n" + m.group(4), text)


def sweep_tables(name: str) -> str:
    """tables.md + claims.md of the sweep's latest FINISHED tables run, with its provenance."""
    from components import lineage, tracking

    c = lineage.client()
    try:
        run = tracking.latest_tables_run(name)
    except LookupError as e:
        raise LookupError(f"{e} (run: rlvr sweep dags/sweeps/{name}.yaml)") from None
    out = Path(run.data.tags.get("rlvr.output_uri", "/nonexistent"))
    parts = []
    for f in ("tables.md", "claims.md"):
        p = out / f if (out / f).is_file() else Path(c.download_artifacts(run.info.run_id, f))
        parts.append(_demote(p.read_text()))
    how = (f"*Printed by `rlvr sweep dags/sweeps/{name}.yaml` (then `rlvr tables {name}`); "
           f"written here by `scripts/readme_tables.py` from its tables run, never typed; "
           f"{provenance(run.data.tags)}.*\n")
    return how + "\n" + "\n".join(parts)


def provenance(tags: dict[str, str]) -> str:
    """The commit the tables run was computed at (every stage it reads is a cache entry whose
    key holds that stage's code fingerprint, so the same commit recomputes the same inputs)."""
    commit = tags.get("mlflow.source.git.commit")
    code = tags.get("rlvr.code", "")[:12]
    if commit:
        return f"computed at commit `{commit[:10]}`"
    return f"commit not recorded (tables code fingerprint `{code}`)"


def _demote(md: str) -> str:
    # the stage's "## " titles become "#### " so they sit under the README's own sections
    return re.sub(r"(?m)^## ", "#### ", md)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", default=[str(REPO / "README.md"), str(REPO / "bench" / "RESULTS.md")])
    ap.add_argument("--check", action="store_true", help="exit 1 if a file would change")
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
    bodies = {}
    for n in names:
        try:
            bodies[n] = sweep_tables(n)
        except LookupError as e:
            where = ", ".join(f for f, t in texts.items() if n in blocks(t))
            print(f"{where}: block rlvr:{n}: {e}", file=sys.stderr)
            return 2
    new = {}
    for f, t in texts.items():
        try:
            new[f] = fill(t, bodies)
        except ValueError as e:
            print(f"{f}: {e}", file=sys.stderr)
            return 2
    changed = [f for f in texts if new[f] != texts[f]]
    if args.check:
        print("stale: " + ", ".join(changed) if changed else "up to date", file=sys.stderr)
        return 1 if changed else 0
    for f in changed:
        tmp = Path(f + ".tmp")
        tmp.write_text(new[f])
        tmp.replace(f)
    print(f"filled {len(names)} block(s) ({', '.join(names) or 'none'}); changed: {', '.join(changed) or 'nothing'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
