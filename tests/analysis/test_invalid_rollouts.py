"""analysis/invalid_rollouts.py on train outputs in their real format (summary.json + metrics.jsonl)."""
from __future__ import annotations

import json

import pytest

from analysis import invalid_rollouts as I


def write_run(d, method, seed, mixed):
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"method": method, "seed": seed, "steps": len(mixed)}))
    rows = [{"step": 0, "val/accuracy": 0.1}] + [{"step": i + 1, "groups/mixed_frac": m, "rollouts": 128.0}
                                                 for i, m in enumerate(mixed)]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return d


def test_invalid_share_per_method_with_thirds_and_the_papers_number(tmp_path, capsys):
    dirs = [write_run(tmp_path / f"g{s}", "grpo", s, [0.4, 0.4, 0.5, 0.5, 0.6, 0.6]) for s in range(2)]
    dirs += [write_run(tmp_path / f"v{s}", "vigor", s, [0.7 + 0.1 * s] * 6) for s in range(2)]
    text = I.main([str(d) for d in dirs])
    df = I.table([I.read_run(d) for d in dirs]).set_index("method")
    assert df.loc["grpo", "invalid % (first third)"] == pytest.approx(60.0)
    assert df.loc["grpo", "invalid % (last third)"] == pytest.approx(40.0)
    assert df.loc["vigor", "invalid % (all)"] == pytest.approx(25.0) and df.loc["vigor", "paper %"] == 20.0
    assert df.loc["vigor", "seeds"] == 2 and df.loc["grpo", "updates"] == 6
    assert "not in the text" in text and capsys.readouterr().out.strip() == text.strip()


def test_records_without_the_metric_or_broken_lines_fail_loudly(tmp_path):
    d = write_run(tmp_path / "r", "grpo", 0, [0.5])
    (d / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ValueError, match="groups/mixed_frac"):
        I.table([I.read_run(d)])
    (d / "metrics.jsonl").write_text('{"step": 1\n')
    with pytest.raises(ValueError, match="metrics.jsonl: line 1"):
        I.read_run(d)
    with pytest.raises(FileNotFoundError, match="summary.json"):
        I.read_run(tmp_path)
