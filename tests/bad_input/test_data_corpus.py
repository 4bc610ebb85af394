"""Malformed dataset rows: every case is one small data file with one bad row (after
good rows). Reading it raises a one-line DataError naming the file and the line (and
the field); the loaders' ``on_error="skip"`` instead skips it, counts it and keeps its
message, and loads the good rows. Never a crash from inside json or the codec."""
from __future__ import annotations

import base64

import pytest

from components.data.loaders import load_dapo17k, load_math
from components.data.schema import DataError, read_problems

from .conftest import jsonl_cases

CASES = jsonl_cases("data_rows.jsonl")
LOADERS = {"math": load_math, "dapo17k": load_dapo17k}


def _write(case: dict, path) -> None:
    raw = [base64.b64decode(ln[4:]) if ln.startswith("B64:") else ln.encode() for ln in case["lines"]]
    path.write_bytes(b"\n".join(raw) + b"\n")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_row_raises_one_line_naming_file_line_and_field(case, tmp_path):
    f = tmp_path / "data.jsonl"
    _write(case, f)
    load = read_problems if case["loader"] == "problems" else LOADERS[case["loader"]]
    with pytest.raises(DataError) as e:
        load(f)
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 500, msg[:300]
    assert msg.startswith(f"{f}:{case['line']}: "), msg
    assert case["expect"] in msg, msg


@pytest.mark.parametrize("case", [c for c in CASES if c["loader"] != "problems"],
                         ids=[c["id"] for c in CASES if c["loader"] != "problems"])
def test_bad_row_is_skipped_and_counted(case, tmp_path):
    f = tmp_path / "data.jsonl"
    _write(case, f)
    got = LOADERS[case["loader"]](f, on_error="skip")
    rep = got.report
    assert rep.skipped == case["skipped"] and len(rep.errors) == case["skipped"]
    assert case["expect"] in rep.errors[0] and rep.errors[0].startswith(f"{f}:{case['line']}: ")
    assert rep.loaded == len(got) == rep.rows - rep.skipped - rep.filtered - rep.duplicates - rep.conflicts


def test_corpus_size():
    assert len(CASES) >= 30
