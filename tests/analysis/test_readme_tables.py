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


def test_fill_replaces_only_the_blocks_stamps_their_digest_and_is_idempotent():
    out = rt.fill(DOC, {"demo": "| a |\n", "fidelity": "F"})
    assert out == DOC.replace("old typed table\n", "| a |\n").replace(
        "<!-- /rlvr:demo -->", f"<!-- /rlvr:demo sha256:{rt.digest('| a |' + chr(10))} -->").replace(
        "<!-- rlvr:fidelity -->\n<!-- /rlvr:fidelity -->",
        f"<!-- rlvr:fidelity -->\nF\n<!-- /rlvr:fidelity sha256:{rt.digest('F' + chr(10))} -->")
    assert rt.fill(out, {"demo": "| a |\n", "fidelity": "F"}) == out
    assert rt.blocks(DOC) == ["demo", "fidelity"] and rt.blocks(out) == ["demo", "fidelity"]


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
    assert "old typed table" in out and "<!-- rlvr:fidelity -->\nF\n<!-- /rlvr:fidelity sha256:" in out


def test_only_names_a_missing_block(tmp_path):
    f = tmp_path / "R.md"
    f.write_text(DOC)
    assert rt.main([str(f), "--only", "sanity"]) == 2
    assert f.read_text() == DOC


def test_check_finds_a_hand_edit_without_the_store(tmp_path, monkeypatch, capsys):
    """Where RLVR_HOME has no tables run of a sweep, --check compares the block with the digest
    its end marker records: the script's own output passes, a typed change fails."""
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    f = tmp_path / "R.md"
    f.write_text(rt.fill(DOC, {"demo": "| a |\n", "fidelity": "F"}))
    assert rt.main([str(f), "--check"]) == 0
    assert "digest only" in capsys.readouterr().err
    assert rt.main([str(f), "--check", "--require-runs"]) == 1
    f.write_text(f.read_text().replace("| a |", "| b |"))
    assert rt.main([str(f), "--check"]) == 1
    assert "R.md: block rlvr:demo: body does not match" in capsys.readouterr().err
    f.write_text(DOC)   # never written by the script: no digest
    assert rt.main([str(f), "--check"]) == 1


def test_fact_blocks_are_checked_against_their_source(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    f = tmp_path / "R.md"
    f.write_text(rt.fill("<!-- rlvr:facts.bad_input -->\n<!-- /rlvr:facts.bad_input -->\n",
                         {"facts.bad_input": "181 malformed inputs\n"}))
    assert rt.main([str(f), "--check"]) == 1      # digest matches, the corpus does not
    assert "rlvr:facts.bad_input is stale" in capsys.readouterr().err
    assert rt.main([str(f)]) == 0 and rt.main([str(f), "--check"]) == 0
    assert rt.bad_input_fact() in f.read_text()


def test_the_repository_blocks_are_current(monkeypatch, tmp_path):
    """README.md and docs/results.md as committed: facts equal their sources, sweep blocks their
    digest (or their tables run, where this RLVR_HOME has one). make test runs the same --check."""
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    assert rt.main(["--check"]) == 0
