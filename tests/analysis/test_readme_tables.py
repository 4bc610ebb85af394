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
    cpu = "Intel(R) Xeon(R) Processor, avx2 avx512f, flags 0a1b2c3d"
    assert rt.provenance({"mlflow.source.git.commit": "4294603f6369f2a3", "rlvr.cpu": cpu}) == \
        f"computed at commit `4294603f63` on `{cpu}`"


def test_stage_runs_record_the_cpu_they_computed_on():
    """The CPU in a stage run's tags names its ISA extensions and a digest of every flag, so
    two machines whose float kernels may differ carry different tags."""
    from components import run_card

    tag = run_card.source_tags("rlvr run-stage x")["rlvr.cpu"]
    assert tag == run_card.cpu() and tag.split(", ")[-1].startswith("flags ")
    assert len(tag.split(", flags ")[1]) == 8


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


def test_analyses_block_copies_its_plots_and_check_finds_a_stale_one(tmp_path, monkeypatch, capsys):
    """rlvr:analyses.SWEEP: the tables run's analyses.md under the page's section (headings one
    level down, plots linked under docs/plots/SWEEP/), its plots copied there byte for byte."""
    from types import SimpleNamespace

    from components import tracking

    out = tmp_path / "tables_out"
    out.mkdir()
    (out / "analyses.md").write_text("## Paper analyses\n\n### VIGOR x\n\n| a |\n\n![x](analysis_x.png)\n")
    (out / "analysis_x.png").write_bytes(b"\x89PNG one")
    run = SimpleNamespace(data=SimpleNamespace(tags={"rlvr.output_uri": str(out), "mlflow.source.git.commit": "ab" * 20}),
                          info=SimpleNamespace(run_id="r"))
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(tracking, "latest_tables_run", lambda name: run)
    monkeypatch.setattr(rt, "PLOTS", tmp_path / "plots")
    monkeypatch.setattr(rt, "REPO", tmp_path)
    f = tmp_path / "R.md"
    f.write_text("<!-- rlvr:analyses.s -->\n<!-- /rlvr:analyses.s -->\n")
    assert rt.main([str(f)]) == 0
    body = rt.bodies_of(f.read_text())["analyses.s"][0]
    assert "#### VIGOR x" in body and "Paper analyses" not in body and "![x](plots/s/analysis_x.png)" in body
    assert (tmp_path / "plots/s/analysis_x.png").read_bytes() == b"\x89PNG one"
    assert rt.main([str(f), "--check"]) == 0
    (out / "analysis_x.png").write_bytes(b"\x89PNG two")
    assert rt.main([str(f), "--check"]) == 1
    assert "plots/s/analysis_x.png: plot of block rlvr:analyses.s is stale" in capsys.readouterr().err


def test_verdicts_summary_follows_the_study_blocks(tmp_path, monkeypatch, capsys):
    """The summary's rows are the study blocks' judged-set rows (pilots left out); a summary left
    behind fails the check; refilling a study block refreshes the summary in the same write."""
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    results = (Path(rt.REPO) / "docs" / "results.md").read_text()
    bodies = rt.bodies_of(results)
    f = tmp_path / "R.md"
    f.write_text("<!-- rlvr:summary.verdicts -->\n<!-- /rlvr:summary.verdicts -->\n"
                 + "".join(f"<!-- rlvr:{n} -->\n{bodies[n][0]}<!-- /rlvr:{n} sha256:{bodies[n][1]} -->\n"
                           for n in ("study_vip_core", "study_pilot3")))
    assert rt.main([str(f), "--only", "study_vip_core"]) == 2      # no tables run here: nothing written
    summary = rt.verdicts_summary({"R.md": f.read_text()})
    assert "`vip>base_estimator` | VIP | `study_vip_core` | **inconclusive** | +0.005226" in summary
    assert "study_pilot3" not in summary and summary.count("\n| `") == 2    # grpo>base and the VIP claim
    assert "2 verdicts from 1 studies: supported: 1, inconclusive: 1." in summary
    assert rt.main([str(f), "--check"]) == 1 and "rlvr:summary.verdicts is stale" in capsys.readouterr().err
    f.write_text(rt.fill(f.read_text(), {"summary.verdicts": summary}))
    assert rt.main([str(f), "--check"]) == 0
    # a study block refilled (here from a stand-in for its tables run) refreshes the summary with it
    rerun = bodies["study_vip_core"][0].replace("| **inconclusive** | +0.005226", "| **supported** | +0.005226")
    monkeypatch.setattr(rt, "source", lambda name: (rerun, {}))
    assert rt.main([str(f), "--only", "study_vip_core"]) == 0
    assert "`vip>base_estimator` | VIP | `study_vip_core` | **supported**" in f.read_text()
    assert "2 verdicts from 1 studies: supported: 2." in f.read_text()
    assert rt.main([str(f), "--check", "--only", "study_vip_core,summary.verdicts"]) == 0
    with pytest.raises(ValueError, match="claims row not understood"):
        rt.verdicts_summary({"R.md": f.read_text().replace("| VIP | VIP beats uniform", "| VIP | A renamed claim")})


def test_summary_compares_each_interval_with_half_the_papers_effect():
    """The done-when of a study's accuracy claim, per row: the interval's half-width against half
    the paper's scaled effect; rows without a paper number (or not accuracy) get no comparison."""
    assert rt.sized("-0.01544 [-0.02264, -0.007738]", "+0.01104 (+2.3%)") == "0.00745 > 0.00552"
    assert rt.sized("-0.01375 [-0.02068, -0.006285]", "+0.02061 (+4.3%)") == "0.0072 ≤ 0.0103"
    assert rt.sized("-0.008594 [-0.01719, +0]", "-0.1 (+8.6%)") == "0.0086 ≤ 0.05"
    assert rt.sized("+0.005226 [-0.00368, +0.01485]", "") == "" and rt.sized("", "+0.1 (+2%)") == ""
    body = rt.bodies_of((Path(rt.REPO) / "docs" / "results.md").read_text())["study_vigor_core"][0]
    summary = rt.verdicts_summary({"R.md": f"<!-- rlvr:study_vigor_core -->\n{body}<!-- /rlvr:study_vigor_core -->\n"})
    rows = {line.split(" | ")[0].strip("| `"): line for line in summary.splitlines() if line.startswith("| `")}
    assert rows["vigor>grpo"].count(" > ") == 1 and rows["vigor>greso"].count(" ≤ ") == 1
    assert "| tokens" not in rows["vigor_rollouts<grpo"] and " ≤ " not in rows["grpo>base"]
    assert "whose interval's half-width is at most half the paper's effect: 1 of 2." in summary
