"""bench/engine_throughput.py's --results: the run's printout into its RESULTS.md block."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from engine_throughput import write_results  # noqa: E402


def test_block_replaced_in_place_appended_when_new_and_log_lines_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench/engine_throughput.py", "--engines", "engine,vllm"])
    res = tmp_path / "RESULTS.md"
    res.write_text("# R\n\nbefore\n<!-- engine_throughput:a -->\nold\n<!-- /engine_throughput:a -->\nafter\n")
    write_results("a", "INFO 12-02 00:10:11 [core.py:1] started\n| engine | 5 |\nUserWarning: x\n", res)
    text = res.read_text()
    assert "old" not in text and "| engine | 5 |" in text and "INFO 12-02" not in text and "Warning" not in text
    assert text.startswith("# R\n\nbefore\n") and text.endswith("<!-- /engine_throughput:a -->\nafter\n")
    assert "`bench/engine_throughput.py --engines 'engine,vllm'` printed" in text
    write_results("b", "| other | 1 |\n", res)
    assert res.read_text().startswith(text.rstrip("\n")) and res.read_text().rstrip().endswith(
        "| other | 1 |\n<!-- /engine_throughput:b -->")


def test_block_without_its_end_marker_is_refused_and_nothing_written(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench/engine_throughput.py"])
    res = tmp_path / "RESULTS.md"
    res.write_text("<!-- engine_throughput:a -->\nold\n")
    with pytest.raises(SystemExit, match="no end marker"):
        write_results("a", "new\n", res)
    assert res.read_text() == "<!-- engine_throughput:a -->\nold\n"
