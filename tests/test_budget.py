"""One response budget per sweep, its pre-flight check, the truncation rate, and filter_hard's
difficulty band."""
from __future__ import annotations

import pytest

from components import stage_graph
from components.sweep import SweepError, parse_sweep
from components.budget import DEFAULT_RESPONSE_TOKENS
from components.trainer.train_config import TrainConfig

BASE = {"name": "b", "seeds": [0], "models": ["tiny"], "model_specs": {"tiny": {}}, "methods": ["grpo", "sft"]}


def sweep(**kw):
    return parse_sweep({**BASE, **kw}, "b.yaml")


def test_every_stage_defaults_to_the_same_budget():
    from components.stages import evaluate, filter_hard, pretrain

    for params in (pretrain.Params(), filter_hard.Params(), evaluate.Params(), TrainConfig()):
        assert params.max_new_tokens == DEFAULT_RESPONSE_TOKENS, type(params)


def test_sweep_budget_reaches_every_generating_stage_and_an_explicit_stage_value_wins():
    s = sweep(max_response_tokens=128, max_prompt_tokens=40,
              stages={"train": {"max_new_tokens": 160}, "pretrain": {"steps": 5}})
    planned = {}
    for stage, params in stage_graph.planned_params(s):
        planned.setdefault(stage, params)
    assert planned["pretrain"]["max_new_tokens"] == 128 and planned["pretrain"]["steps"] == 5
    assert planned["filter_hard"]["max_new_tokens"] == 128
    assert planned["train"]["max_new_tokens"] == 160 and planned["train"]["max_prompt_length"] == 40
    assert planned["evaluate"]["max_new_tokens"] == 128
    assert "max_new_tokens" not in planned["seed_prefixes"] and "max_new_tokens" not in planned["tables"]
    # what the DAG reads (the stages block itself) carries it too, and re-parsing the dump is stable
    assert s.stages.filter_hard["max_new_tokens"] == 128
    assert parse_sweep(s.model_dump(mode="json"), "again.yaml").stages == s.stages


def test_no_sweep_budget_leaves_the_stage_params_untouched():
    s = sweep()
    assert s.stages.train == {} and s.stages.filter_hard == {}


def test_a_training_budget_below_filter_or_eval_is_refused_with_file_and_field():
    with pytest.raises(SweepError) as e:
        sweep(stages={"train": {"max_new_tokens": 64}})
    msg = str(e.value)
    assert msg.startswith("b.yaml: stages.train.max_new_tokens: 64 is below the filter/eval response budget 96")
    assert "\n" not in msg and "short_train_budget" in msg
    with pytest.raises(SweepError, match=r"b.yaml: method_train.grpo.max_new_tokens: 100 .* budget 128"):
        sweep(max_response_tokens=128, method_train={"grpo": {"max_new_tokens": 100}})
    with pytest.raises(SweepError, match="stages.train.max_new_tokens: 96 .* budget 128"):
        sweep(stages={"evaluate": {"max_new_tokens": 128}})
    # said on purpose: accepted
    assert sweep(stages={"train": {"max_new_tokens": 64}}, short_train_budget=True).stages.train["max_new_tokens"] == 64


def test_filter_band_keeps_by_pass_rate_over_all_k_samples():
    from components.stages.filter_hard import Params

    p = Params(k=16, min_pass=0.2, max_pass=0.8)
    assert p.band and p.max_successes == 12
    assert [s for s in range(17) if p.keeps(s, 16)] == list(range(4, 13))
    assert not p.keeps(6, 8)                  # an early-stopped prompt never had all k samples
    hard = Params(k=32, c=1)
    assert not hard.band and hard.keeps(1, 8) and not hard.keeps(2, 32)
    with pytest.raises(ValueError, match="min_pass"):
        Params(k=16, min_pass=0.9, max_pass=0.1)


class Recording:
    """The real engine, keeping what it returned."""

    def __init__(self, engine):
        self.engine, self.outs = engine, []

    def generate(self, reqs, sp, purpose="train_rollout"):
        out = self.engine.generate(reqs, sp, purpose=purpose)
        self.outs += [c for o in out for c in o]
        return out


def test_filter_pool_counts_every_truncated_response(tok, model):
    """A random tiny policy rarely ends a response: most samples hit the 6-token budget."""
    from components.data.synthetic import generate_problems
    from components.engine.base import TokenMeter
    from components.stages.common import grade_fn, make_engine
    from components.data.task_stages import filter_pool
    from components.stages.filter_hard import Params

    problems = generate_problems(5, [3], seed=0, operand_digits=1)
    params = Params(k=4, round_size=2, max_new_tokens=6, min_pass=0.0, max_pass=0.5)
    grade = grade_fn()
    clip = [0, 0]
    try:
        engine = Recording(make_engine(model, tok, TokenMeter()))
        res = filter_pool(problems, engine, grade, tok, params, seed=0, clip=clip)
    finally:
        grade.grader.close()
    assert [d for _, _, d in res] == [4] * 5 and all(s == 0 for _, s, _ in res)
    cut = [c for c in engine.outs if c.finish_reason == "length"]
    assert clip == [len(cut), 20] and len(cut) > 10 and all(len(c.token_ids) == 6 for c in cut)
    assert all(params.keeps(s, d) for _, s, d in res)


def test_trainer_logs_the_clip_ratio_of_its_rollouts_and_validations(tok, model, tmp_path):
    import copy

    from components.data.synthetic import generate_problems
    from components.stages.base import NullTracker
    from components.trainer.embedded import EmbeddedTrainer

    problems = generate_problems(8, [3], seed=1)
    seen = []

    def parity(texts, golds):
        return [(float(len(t) % 2 == 0), "rule") for t in texts]

    cfg = TrainConfig(steps=2, batch_prompts=4, max_new_tokens=5, val_size=4, val_samples=2, val_every=1,
                      method_config={"n": 4})
    tr = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, parity, NullTracker())
    real = tr.engine.generate

    def recording(reqs, sp, purpose="train_rollout"):
        out = real(reqs, sp, purpose=purpose)
        seen.append((purpose, [c.finish_reason == "length" for o in out for c in o]))
        return out

    tr.engine.generate = recording
    summary = tr.fit(problems, problems[:4], {"expert_traces": {}, "p0": {}}, tmp_path)
    rows = [h for h in tr.history if "response_length/clip_ratio" in h]
    train_calls = [c for p, c in seen if p == "train_rollout"]
    assert [r["response_length/clip_ratio"] for r in rows] == [sum(c) / len(c) for c in train_calls]
    val_calls = [c for p, c in seen if p == "validation"]
    assert [h["val/clip_ratio"] for h in tr.history if "val/clip_ratio" in h] == [sum(c) / len(c) for c in val_calls]
    assert summary["clip_ratio"] == pytest.approx(sum(r["response_length/clip_ratio"] for r in rows) / 2)
    assert summary["max_new_tokens"] == 5
