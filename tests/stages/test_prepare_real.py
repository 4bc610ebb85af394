"""prepare_data on a real-dataset source (an OpenR1-Math-220k file in its public schema,
written here: the dataset itself is not on this machine), through the cached stage runner."""
from __future__ import annotations

import json

import pytest

from components import lineage
from components.data.schema import read_problems

BASE = {"solution": "s", "problem_type": "Algebra", "question_type": "math-word-problem",
        "correctness_llama": None, "messages": [], "correctness_count": 1, "source": "olympiads"}


def rows(n):
    out = []
    for i in range(n):
        ok = i % 3 != 0                      # every third problem has no verified, complete trace
        out.append({**BASE, "problem": f"What is {i}+{i}?", "answer": str(2 * i), "uuid": f"u{i}",
                    "generations": [f"{i}+{i}={2 * i}. \\boxed{{{2 * i}}}", "wrong \\boxed{0}"],
                    "correctness_math_verify": [ok, False], "is_reasoning_complete": [True, True],
                    "finish_reasons": ["stop", "stop"]})
    return out


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def write(path, rs):
    path.write_text("".join(json.dumps(r) + "\n" for r in rs))
    return path


def test_openr1_file_splits_into_disjoint_pools_with_verified_traces(home):
    src = write(home / "openr1.jsonl", rows(30))
    res = lineage.run_stage("prepare_data", {"source": "openr1", "path": str(src), "heldout_fraction": 0.2,
                                             "seed": 1}, {}, sweep="real")
    from pathlib import Path
    out = Path(res["uri"])
    train, held = read_problems(out / "train_pool.jsonl"), read_problems(out / "heldout_pool.jsonl")
    assert (len(train), len(held)) == (24, 6)
    assert not {p.uid for p in train} & {p.uid for p in held}
    for p in train + held:
        # only the math-verify-correct, complete, stopped generation is an expert trace
        assert all("\\boxed{0}" not in t for t in p.traces)
        assert len(p.traces) == (0 if int(p.meta["uuid"][1:]) % 3 == 0 else 1)
    assert read_problems(out / "pretrain.jsonl") == []
    assert lineage.verify_manifest(out)


def test_malformed_row_names_file_and_line_and_leaves_nothing(home):
    src = write(home / "bad.jsonl", rows(5))
    lines = src.read_text().splitlines()
    lines[3] = lines[3][:40]                      # a truncated (broken) JSON line
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(Exception, match=r"bad\.jsonl:4"):
        lineage.run_stage("prepare_data", {"source": "openr1", "path": str(src)}, {}, sweep="real")
    assert not list((home / "home" / "artifacts").glob("prepare_data/*"))   # nothing half-written
    res = lineage.run_stage("prepare_data", {"source": "openr1", "path": str(src), "on_error": "skip"}, {},
                            sweep="real")
    assert res["summary"]["skipped"] == 1
    assert res["summary"]["train_pool"] + res["summary"]["heldout_pool"] == 4


def test_real_source_needs_a_path(home):
    with pytest.raises(lineage.StageError, match="path"):
        lineage.run_stage("prepare_data", {"source": "math"}, {}, sweep="real")
