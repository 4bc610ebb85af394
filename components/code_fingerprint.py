"""The fingerprint of the code a stage runs, part of its cache key: changing what a stage
computes invalidates its cached artifacts even when nobody bumps its ``VERSION``.

Scheme: the stage's module plus every project module it imports, transitively, found by
PARSING source files (``ast``), never importing them, so the DAG processor and the cached-rerun
check compute it without torch, in milliseconds. The fingerprint is the SHA-256 over the sorted
``(module name, SHA-256 of the file's syntax tree)`` pairs: ``ast.dump`` of the parsed file, so
editing a comment or the layout keeps cached artifacts, while any change to code, a constant or
a docstring invalidates them.

- Edges: every ``import`` / ``from ... import`` anywhere in a file, inside functions too (stages
  import their heavy dependencies inside ``run``); relative imports are resolved; ``import a.b.c``
  also counts ``a`` and ``a.b`` (their ``__init__`` runs); ``from a import b`` counts ``a.b`` when
  that is a module. A string constant naming a project module (``"components.methods.grpo:GRPO"``)
  counts as an import too: registries import by name.
- Project modules: the packages ``components`` and ``analysis`` and the stage module's own
  top-level package (a plug-in or test stage). Third-party code is pinned by the lock files and
  is not fingerprinted.
- Left out: the bookkeeping modules listed in ``BOOKKEEPING``. They name, store and record a
  stage's outputs (MLflow run names, manifests, receipts, progress lines, the command line) but
  compute none of them; counting them would invalidate every cached artifact on, say, a change
  of MLflow run names. They are not followed either.
- Not covered: data files a stage reads from the repository (``data/benchmarks``); a change there
  must be picked up by the stage's inputs or params, or a ``VERSION`` bump.

Why not one digest of the whole package: a change to the tables stage would then recompute
training. Why not byte-code or ``inspect``: both need the module imported. The import graph is
an over-approximation of what runs (an imported module whose function is never called still
counts), which errs on the safe side: a spurious recompute, never a stale artifact.

Per-file results (syntax-tree digest, imports) are cached per process and in
``$RLVR_HOME/cache/code-fingerprint-pyX.Y.json``, keyed by path, module name and a stat stamp
(inode, size, mtime, ctime): a fresh process re-parses only files that changed.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("components", "analysis")
BOOKKEEPING = frozenset({
    "components.lineage", "components.tracking", "components.artifacts", "components.receipts",
    "components.progress", "components.cli", "components.code_fingerprint", "components.run_card",
})
_MODULE_STRING = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?::[A-Za-z_]\w*)?$")

# "path\0module" -> [ino, size, mtime_ns, ctime_ns, sha, imports]: per process, and on disk
_FILES: dict[str, list] = {}
_DIRTY = "\0dirty"  # marks a disk-cache dict with new entries
_DISKS: dict[str, dict] = {}  # disk-cache file -> its entries
# (module, search roots) -> its source file; only hits are kept: a module may appear later
_FOUND: dict[tuple[str, tuple[str, ...]], str] = {}


def _find(module: str, roots: tuple[str, ...]) -> str | None:
    """The source file of ``module`` (``a/b.py`` or ``a/b/__init__.py``) under the first root
    that has it; None for a module without source here (third-party, builtin, missing)."""
    hit = _FOUND.get((module, roots))
    if hit is not None and os.path.isfile(hit):
        return hit
    rel = module.replace(".", os.sep)
    for root in roots:
        for cand in (os.path.join(root, rel + ".py"), os.path.join(root, rel, "__init__.py")):
            if os.path.isfile(cand):
                _FOUND[(module, roots)] = cand
                return cand
    return None


def _imports(path: str, tree: ast.AST, module: str) -> tuple[str, ...]:
    """Every module name ``path`` (module ``module``) may import, as written, resolved."""
    is_pkg = os.path.basename(path) == "__init__.py"
    package = module if is_pkg else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base_parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base:
                out.add(base)
                out.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
            if m := _MODULE_STRING.match(node.value):
                out.add(m.group(1))
    return tuple(sorted(out))


def _file_info(path: str, module: str, disk: dict) -> tuple[str, tuple[str, ...]]:
    """(syntax-tree SHA-256, imports) of a file, recomputed only when its stat stamp changed.
    The stamp has the ctime, which every write updates and no tool can set back (mtime can be:
    ``touch -d``, ``tar``, ``rsync -t``), so a content change is never mistaken for a hit."""
    st = os.stat(path)
    stamp = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    key = f"{path}\0{module}"
    hit = _FILES.get(key) or disk.get(key)
    if hit and hit[:4] == stamp:
        _FILES[key] = hit
        if disk.get(key) != hit:  # known in this process only: share it
            disk[key], disk[_DIRTY] = hit, True
        return hit[4], tuple(hit[5])
    with open(path, "rb") as f:
        data = f.read()
    tree = ast.parse(data, filename=path)
    # the syntax tree, not the bytes: comments and layout do not change what a stage computes
    sha = hashlib.sha256(ast.dump(tree).encode()).hexdigest()
    imports = _imports(path, tree, module)
    _FILES[key] = disk[key] = [*stamp, sha, list(imports)]
    disk[_DIRTY] = True
    return sha, imports


def _disk_path() -> Path | None:
    """Where parsed results outlive the process (fresh Airflow tasks, `rlvr sweep`'s cached-rerun
    check): under RLVR_HOME, per Python version (``ast.dump`` differs between versions)."""
    try:
        from components.artifacts import rlvr_home

        return rlvr_home() / "cache" / f"code-fingerprint-py{sys.version_info[0]}.{sys.version_info[1]}.json"
    except Exception:  # noqa: BLE001 - the disk cache is an optimisation only
        return None


def _load_disk(path: Path | None) -> dict:
    """The disk cache at ``path``, read once per process."""
    if path is None:
        return {}
    if str(path) not in _DISKS:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        _DISKS[str(path)] = data if isinstance(data, dict) else {}
    return _DISKS[str(path)]


def _save_disk(path: Path | None, disk: dict) -> None:
    """Atomically (tasks run concurrently: the last writer wins, no one reads a torn file)."""
    if path is None or not disk.pop(_DIRTY, False):
        return
    try:
        from components.artifacts import write_atomic

        write_atomic(path, json.dumps(disk))
    except OSError:
        pass


def _roots() -> tuple[str, ...]:
    extra = [os.path.abspath(p or os.getcwd()) for p in sys.path if isinstance(p, str)]
    return tuple(dict.fromkeys([str(REPO), *extra]))


def _closure(module_path: str) -> dict[str, tuple[str, str]]:
    """{module: (source file, syntax-tree SHA-256)} of ``module_path`` and the project modules
    it imports transitively, bookkeeping modules left out."""
    start = module_path.partition(":")[0]
    top = {*PROJECT_PACKAGES, start.split(".")[0]}
    roots, repo = _roots(), (str(REPO),)
    where = _disk_path()
    disk = _load_disk(where)
    found: dict[str, tuple[str, str]] = {}
    considered: set[str] = set()
    parts = start.split(".")
    todo = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]  # its packages' __init__ run too
    while todo:
        mod = todo.pop()
        if mod in considered:
            continue
        considered.add(mod)
        if mod in BOOKKEEPING or mod.split(".")[0] not in top:
            continue
        path = _find(mod, repo if mod.split(".")[0] in PROJECT_PACKAGES else roots)
        if path is None:
            if mod == start:
                raise FileNotFoundError(f"stage module {start}: no source file under {', '.join(roots[:3])}")
            continue  # e.g. "from pkg import function": pkg.function is not a module
        sha, imports = _file_info(path, mod, disk)
        found[mod] = (path, sha)
        for name in imports:
            p = name.split(".")
            todo += [q for q in (".".join(p[:i]) for i in range(1, len(p) + 1)) if q not in considered]
    _save_disk(where, disk)
    return found


def module_files(module_path: str) -> dict[str, str]:
    """{module name: source file} of ``module_path`` (``pkg.mod`` or ``pkg.mod:obj``) and the
    project modules it imports transitively, bookkeeping modules left out."""
    return {mod: path for mod, (path, _) in _closure(module_path).items()}


def code_fingerprint(module_path: str) -> str:
    """SHA-256 over the sorted (module, syntax-tree SHA-256) pairs of :func:`module_files`."""
    h = hashlib.sha256()
    for mod, (_, sha) in sorted(_closure(module_path).items()):
        h.update(f"{mod}\0{sha}\n".encode())
    return h.hexdigest()
