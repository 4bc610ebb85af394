"""scripts/readme_tables.py: the README's result blocks are replaced, never typed."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("readme_tables", Path(__file__).resolve().parents[2] / "scripts" / "readme_tables.py")
rt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rt)

DOC = """# x
<!-- rlvr:demo -->
old typed table
<!-- /rlvr:demo -->
text between
<!-- rlvr:fidelity -->
<!-- /rlvr:fidelity -->
end
"""


def test_fill_replaces_only_the_blocks_and_is_idempotent():
    out = rt.fill(DOC, {"demo": "| a |\n", "fidelity": "F"})
    assert out == DOC.replace("old typed table\n", "| a |\n").replace(
        "<!-- rlvr:fidelity -->\n", "<!-- rlvr:fidelity -->\nF\n")
    assert rt.fill(out, {"demo": "| a |\n", "fidelity": "F"}) == out
    assert rt.blocks(DOC) == ["demo", "fidelity"]


def test_unclosed_block_is_an_error():
    with pytest.raises(ValueError, match="'sanity' has no matching"):
        rt.fill(DOC + "<!-- rlvr:sanity -->\n", {"demo": "", "fidelity": ""})


def test_missing_sweep_stops_before_writing(tmp_path, monkeypatch):
    f = tmp_path / "R.md"
    f.write_text(DOC)
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    assert rt.main([str(f)]) == 2
    assert f.read_text() == DOC


def test_provenance_names_the_commit_or_says_it_is_missing():
    assert rt.provenance({"mlflow.source.git.commit": "4294603f6369f2a3", "rlvr.code": "ab" * 32}) == \
        "computed at commit `4294603f63`"
    assert rt.provenance({"rlvr.code": "cd" * 32}) == "commit not recorded (tables code fingerprint `cdcdcdcdcdcd`)"


def test_only_some_blocks_keeps_the_others():
    out = rt.fill(DOC, {"fidelity": "F"})
    assert "old typed table" in out and "<!-- rlvr:fidelity -->\nF\n<!-- /rlvr:fidelity -->" in out


def test_only_names_a_missing_block(tmp_path):
    f = tmp_path / "R.md"
    f.write_text(DOC)
    assert rt.main([str(f), "--only", "sanity"]) == 2
    assert f.read_text() == DOC
