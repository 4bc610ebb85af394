"""A full disk (ENOSPC injected in the stage's own writes, in lineage's manifest write,
in the atomic move and in the MLflow artifact upload after the move) fails the stage
with one clear line, leaves no artifact marked finished and no temporary dir, and the
next attempt computes normally. A finished artifact whose files no longer match its
manifest (edited, removed, added, manifest broken) is never used: it is recomputed."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from components import lineage
from components.lineage import StageError, run_stage

from .conftest import stage_runs


def _enospc(path="") -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), *([path] if path else []))


def _assert_clean_failure(home: Path, stage: str, exc: BaseException) -> None:
    msg = str(exc)
    assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    assert "\n" not in msg and f"stage '{stage}'" in msg and "No space left on device" in msg
    d = home / "artifacts" / stage
    left = [p.name for p in d.iterdir()] if d.exists() else []
    assert left == [], left                                   # no final, no tmp, nothing verified
    (run,) = stage_runs(stage)
    assert run.info.status == "FAILED" and "No space left on device" in run.data.tags["rlvr.error"]


def test_enospc_in_the_stage_write_path(home, monkeypatch):
    monkeypatch.setenv("FAULT_ENOSPC_AFTER", "10000")     # the disk fills during the 3rd chunk
    with pytest.raises(OSError) as e:
        run_stage("writer", {}, {})
    _assert_clean_failure(home, "writer", e.value)
    assert str(home / "artifacts" / "writer") in str(e.value)  # where it was writing
    monkeypatch.delenv("FAULT_ENOSPC_AFTER")
    ok = run_stage("writer", {}, {})
    assert ok["cached"] is False and lineage.verify_manifest(ok["uri"])
    assert (Path(ok["uri"]) / "big.bin").stat().st_size == 8 * 4096


def _fail_fsync_of(name: str, monkeypatch) -> None:
    real = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/" + name):
            raise _enospc()
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)


def test_enospc_while_lineage_writes_the_manifest(home, monkeypatch):
    _fail_fsync_of(lineage.MANIFEST, monkeypatch)
    with pytest.raises(OSError) as e:
        run_stage("prepare_data", {}, {})
    _assert_clean_failure(home, "prepare_data", e.value)
    monkeypatch.undo()
    monkeypatch.setenv("RLVR_HOME", str(home))
    assert run_stage("prepare_data", {}, {})["cached"] is False


def test_enospc_while_moving_the_artifact_into_place(home, monkeypatch):
    real = os.rename

    def rename(src, dst):
        if ".tmp-" in str(src):
            raise _enospc(str(dst))
        return real(src, dst)
    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError) as e:
        run_stage("prepare_data", {}, {})
    _assert_clean_failure(home, "prepare_data", e.value)


def test_enospc_in_mlflow_upload_after_the_move_unplaces_the_artifact(home, monkeypatch):
    def upload(self, path, artifact_path=None):
        raise _enospc(str(path))
    monkeypatch.setattr(lineage.MlflowTracker, "log_artifact", upload)
    with pytest.raises(OSError) as e:
        run_stage("prepare_data", {}, {})
    _assert_clean_failure(home, "prepare_data", e.value)
    monkeypatch.undo()
    monkeypatch.setenv("RLVR_HOME", str(home))
    ok = run_stage("prepare_data", {}, {})
    assert ok["cached"] is False and lineage.client().get_run(ok["run_id"]).info.status == "FINISHED"


def _edit(d: Path) -> None:
    (d / "out.json").write_text((d / "out.json").read_text().replace("8", "9"))


def _remove(d: Path) -> None:
    (d / "sub" / "notes.md").unlink()


def _add(d: Path) -> None:
    (d / "sub" / "extra.bin").write_bytes(b"\0")


def _truncate(d: Path) -> None:
    with open(d / "out.json", "r+b") as f:
        f.truncate(3)


def _break_manifest(d: Path) -> None:
    (d / lineage.MANIFEST).write_text("{not json")


def _forge_digest(d: Path) -> None:  # files listed right, tree digest wrong
    m = json.loads((d / lineage.MANIFEST).read_text())
    m["digest"] = "0" * 64
    (d / lineage.MANIFEST).write_text(json.dumps(m))


def _drop_manifest(d: Path) -> None:
    (d / lineage.MANIFEST).unlink()


@pytest.mark.parametrize("tamper", [_edit, _remove, _add, _truncate, _break_manifest, _forge_digest, _drop_manifest],
                         ids=lambda f: f.__name__.strip("_"))
def test_tampered_artifact_is_refused_downstream_and_recomputed(home, tamper):
    first = run_stage("prepare_data", {}, {})
    model = run_stage("pretrain", {}, {"data": first["uri"]})
    tamper(Path(first["uri"]))
    assert not lineage.verify_manifest(first["uri"])
    with pytest.raises(StageError, match=r"input 'data': .* not a finished artifact"):
        run_stage("pretrain", {"steps": 2}, {"data": first["uri"]})
    again = run_stage("prepare_data", {}, {})
    assert again["cached"] is False and again["run_id"] != first["run_id"] and again["uri"] == first["uri"]
    assert again["digest"] == first["digest"] and lineage.verify_manifest(again["uri"])
    # same content again, so the downstream key is unchanged and still a hit
    assert run_stage("pretrain", {}, {"data": again["uri"]})["run_id"] == model["run_id"]
    corrupt = [p for p in (home / "artifacts" / "prepare_data").iterdir() if ".corrupt-" in p.name]
    assert len(corrupt) == 1                                   # kept aside for inspection, never used
