"""What ``trainer_reference.py`` and ``agentic_reference.py`` (this folder) share: the weight digest, the
record diff and the ``--save`` / ``--compare`` loop over named cases.

A case's record is a dict with ``history`` (per-step metrics, wall-clock keys dropped),
``weights`` (sha256 of the final state dict), ``meter`` and ``method_state``, optionally
``records`` (digests of the written files) and ``summary``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence


def weights_digest(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def diff(a: dict, b: dict) -> list[str]:
    """Every way record ``b`` differs from ``a`` (empty: identical), one line each."""
    out = [k for k in ("weights", "meter", "method_state") if a[k] != b[k]]
    if len(a["history"]) != len(b["history"]):
        out.append(f"history rows {len(a['history'])} != {len(b['history'])}")
    for ra, rb in zip(a["history"], b["history"]):
        bad = [k for k in sorted(set(ra) | set(rb)) if ra.get(k) != rb.get(k)]
        if bad:
            out.append(f"step {ra.get('step')}: " + ", ".join(f"{k} {ra.get(k)!r} -> {rb.get(k)!r}" for k in bad))
    for f in sorted(set(a.get("records", {})) | set(b.get("records", {}))):
        if a["records"].get(f) != b["records"].get(f):
            out.append(f"record {f} differs")
    sa, sb = a.get("summary", {}), b.get("summary", {})
    if sa != sb:
        out.append("summary: " + ", ".join(f"{k} {sa.get(k)!r} -> {sb.get(k)!r}"
                                           for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k)))
    return out


def parse_args(doc: str, known: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", type=Path)
    g.add_argument("--compare", type=Path)
    ap.add_argument("--cases", default=",".join(known))
    args = ap.parse_args()
    names = [n for n in args.cases.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; known: {', '.join(known)}")
    return args, names


def record_or_compare(args: argparse.Namespace, names: Sequence[str], run: Callable[[str, Path], dict],
                      info: Callable[[dict], str] = lambda rec: f"weights {rec['weights'][:12]}",
                      out: dict | None = None, also_equal: dict[str, str] | None = None) -> int:
    """Run each case; with ``--compare`` print IDENTICAL / CHANGED against the reference and
    every difference, with ``--save`` write the records. ``also_equal`` maps a case to another
    case of this run whose record it must equal (a resumed run vs the uninterrupted one)."""
    ref = json.loads(args.compare.read_text()) if args.compare else {}
    out = {} if out is None else out
    changed, width = 0, max(map(len, names)) + 4
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            t0 = time.monotonic()
            out[n] = run(n, Path(tmp))
            took = f"({time.monotonic() - t0:.1f}s) {info(out[n])}"
            if not args.compare:
                print(f"{n:{width}s} recorded {took}")
            elif n not in ref:
                print(f"{n:{width}s} NOT IN REFERENCE")
                changed += 1
            else:
                d = diff(ref[n], out[n])
                changed += bool(d)
                print(f"{n:{width}s} {'IDENTICAL' if not d else 'CHANGED'} {took}")
                for line in d:
                    print(f"    {line}")
            twin = (also_equal or {}).get(n)
            if twin in out:
                d = diff(out[twin], out[n])
                print(f"    vs uninterrupted {twin}: {'IDENTICAL' if not d else 'DIFFERENT'}")
                for line in d:
                    print(f"        {line}")
    if args.save:
        args.save.write_text(json.dumps(out, indent=1, sort_keys=True))
    else:
        print(f"{len(names) - changed}/{len(names)} cases identical")
    return 0
