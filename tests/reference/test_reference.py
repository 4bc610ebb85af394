"""The reference harnesses run under pytest: a case's record is reproducible (the property a
``--compare`` across a refactor relies on), a differing record is reported, and a run resumed
from its checkpoint records what the uninterrupted run did."""
from __future__ import annotations

import agentic_reference
import torch
import trainer_reference
from records import diff


def test_trainer_records_repeat_and_a_difference_is_named(tmp_path):
    torch.set_num_threads(1)
    tok, model, problems = trainer_reference.setup()
    a = trainer_reference.run_case("vsr_no_scoring", tok, model, problems, tmp_path / "a")
    b = trainer_reference.run_case("vsr_no_scoring", tok, model, problems, tmp_path / "b")
    assert diff(a, b) == []
    c = trainer_reference.run_case("static_prefix", tok, model, problems, tmp_path / "c")
    assert "method_state" in diff(a, c)    # a static pool: the policy's successes never enter it


def test_agentic_resumed_run_records_the_uninterrupted_one(tmp_path):
    torch.set_num_threads(1)
    tok, model = agentic_reference.base_policy()
    full = agentic_reference.run_case("vsr", tok, model, tmp_path / "a")
    resumed = agentic_reference.run_case("vsr_resumed", tok, model, tmp_path / "b")
    assert diff(full, resumed) == [] and full["history"]
