"""Where things live and how a finished artifact is recognised: the store locations under
``RLVR_HOME``, content-addressed cache keys, and ``manifest.json`` (file digests + a tree
digest) written durably. Light: stdlib only, so cache-key helpers and the DAG parser can
use it without mlflow.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"


# ---------------------------------------------------------------- settings

def default_home() -> Path:
    """The store when ``RLVR_HOME`` is unset: ``$XDG_DATA_HOME/rlvr`` (``~/.local/share/rlvr``).
    Never the working directory: an Airflow scheduler, a worker and a shell started in different
    directories must find the same store."""
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "rlvr"


def rlvr_home() -> Path:
    """``$RLVR_HOME`` if set (``make demo`` sets it to the checkout's ``.rlvr``), else
    :func:`default_home`."""
    return Path(os.environ.get("RLVR_HOME") or default_home()).expanduser().resolve()


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{rlvr_home() / 'mlflow.db'}"


def artifact_root() -> Path:
    return rlvr_home() / "mlartifacts"


def artifact_dir(stage: str, key: str) -> Path:
    return rlvr_home() / "artifacts" / stage / key


def work_dir(stage: str, key: str) -> Path:
    return rlvr_home() / "work" / stage / key


# ---------------------------------------------------------------- digests + manifest

def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key(stage: str, version: Any, params: dict, input_digests: dict[str, str], code: str) -> str:
    """What a stage's output is a function of: its name, VERSION, validated params, the digests of
    its inputs and ``code``, the fingerprint of the code it runs
    (:func:`components.code_fingerprint.code_fingerprint`)."""
    if not code:
        raise ValueError(f"cache_key({stage!r}): the stage's code fingerprint is required")
    blob = _canonical({"stage": stage, "version": version, "params": params, "inputs": input_digests,
                       "code": code})
    return hashlib.sha256(blob.encode()).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _file_digests(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            rel = p.relative_to(root).as_posix()
            if rel != MANIFEST:
                out[rel] = file_sha256(p)
    return out


def tree_digest(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]}\n".encode())
    return h.hexdigest()


def read_manifest(d: str | Path) -> dict | None:
    try:
        return json.loads((Path(d) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def verify_manifest(d: str | Path) -> bool:
    """True iff manifest.json exists and every file (and only those) matches its digest."""
    m = read_manifest(d)
    if not m or not isinstance(m.get("files"), dict):
        return False
    try:
        files = _file_digests(Path(d))
    except OSError:
        return False
    return files == m["files"] and tree_digest(files) == m.get("digest")


def _fsync_dir(d: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to a temp file in ``path``'s directory, fsync it, then rename it over
    ``path``: a reader (another process, the XCom sidecar after the container exits) sees the old
    file or the whole new one, never half of it; a crash mid-write leaves no temp file behind."""
    import tempfile

    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the file from a reader under another uid
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_manifest(d: Path, manifest: dict) -> None:
    p = d / MANIFEST
    with open(p, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(d)


def _strict_json(obj: Any) -> Any:
    """The summary travels as XCom, which is strict JSON: NaN/inf become null (pandas
    means of empty columns are NaN), unknown types become strings."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {str(k): _strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict_json(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    if hasattr(obj, "item"):  # numpy scalars
        return _strict_json(obj.item())
    return str(obj)


def _uri_path(uri: str) -> Path:
    return Path(uri.removeprefix("file://")).expanduser().resolve()
