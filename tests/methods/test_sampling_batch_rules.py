"""Generation-batch rules: GRESO's adaptive next-sampling batch (docs/methods.md §6, the
official trainer's arithmetic) and DAPO's generation batch multiplier (section 8: 3 x the
train batch per round, as the DAPO script)."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from components.data.schema import Problem
from components.engine.base import Completion, SamplingParams, TokenMeter
from components.methods.base import RolloutContext
from components.methods.greso import next_sampling_size
from components.methods.registry import build


class ScriptedEngine:
    """One token per sample. A prompt whose answer is "mix" alternates '1', '0', ...: a
    mixed group; any other prompt answers '1' every time: a zero-variance group. Records
    the prompts (tags) of every call."""

    def __init__(self, kinds: dict[str, str]):
        self.meter, self.tokenizer, self.kinds = TokenMeter(), None, kinds
        self.calls: list[list[str]] = []

    def generate(self, reqs, params, purpose="train_rollout"):
        self.calls.append([r.tag for r in reqs])
        out = [[Completion((6,), "1", "stop") if self.kinds[r.tag] != "mix" or j % 2 == 0
                else Completion((5,), "0", "stop") for j in range(r.n)] for r in reqs]
        n = sum(r.n for r in reqs)
        self.meter.record(purpose, sum(len(r.context_ids) for r in reqs), n, n, len(reqs))
        return out


def grade(texts, golds):
    return [(float(t == "1") if g == "mix" else 1.0, "rule") for t, g in zip(texts, golds)]


def probs(kinds):
    return [Problem(uid=f"q{i}", prompt=f"problem {i}", answer=k) for i, k in enumerate(kinds)]


def ctx(engine, step=0):
    return RolloutContext(engine=engine, grade=grade, encode_prompt=lambda p: (1, 2, 3),
                          sampling=SamplingParams(seed=0), step=step)


# ---------------------------------------------------------------------------- GRESO
@pytest.mark.parametrize("remaining,zv,expected", [
    # the official script: real_train_batch_size 256 prompts, n = 8, sampling_batch_size 384, minimum 64
    ((256 - 100) * 8, 0.5, (384, False)),    # int(1248 / 0.5 / 8 * 1.25) = 390 > 384: capped, not last
    ((256 - 200) * 8, 0.5, (140, True)),     # int(448 / 0.5 / 8 * 1.25) = 140 <= 384: the last round
    ((256 - 250) * 8, 0.25, (64, True)),     # int(48 / 0.75 / 8 * 1.25) = 10, raised to the minimum 64
    ((256 - 250) * 8, 1.0, (384, False)),    # nothing but zero-variance groups: a full round again
    ((256 - 255) * 8, 0.9, (64, True)),      # int(8 / 0.1 / 8 * 1.25) = int(12.5...) = 12, raised to 64
])
def test_next_sampling_size_official_arithmetic(remaining, zv, expected):
    assert next_sampling_size(remaining, zv, 8, 384, 64) == expected


def test_greso_adaptive_refills_with_the_estimated_round_size():
    # batch: 4 prompts that always succeed (zero variance); the rest of the pool is mixed
    pool = probs(["1"] * 4 + ["mix"] * 20)
    eng = ScriptedEngine({p.uid: p.answer for p in pool})
    m = build("greso", {"n": 4, "batch_filling": "adaptive"})
    m.setup(pool, {})
    out = m.rollout(pool[:4], ctx(eng), np.random.default_rng(0))
    # round 0: S = ceil(1.5 * 4) = 6 prompts (the batch + 2 drawn); 2 mixed groups kept, zv = 4/6;
    # round 1: int((4 - 2) * 4 / (1 - 4/6) / 4 * 1.25) = 7, capped at S = 6
    assert [len(c) for c in eng.calls] == [6, next_sampling_size(8, 1 - 2 / 6, 4, 6, 1)[0]] == [6, 6]
    assert eng.calls[0][:4] == [p.uid for p in pool[:4]]
    assert len(out) == 4 and all(g.mixed for g in out)
    assert [g.problem_uid for g in out] == eng.calls[0][4:] + eng.calls[1][:2]   # generation order
    t, d = eng.meter.totals("train_rollout"), eng.meter.totals("discarded")
    assert t["sequences"] == 16 and d["sequences"] == 12 * 4 - 16
    assert m.last_stats["rollouts"] == 48 and m.last_stats["gen_rounds"] == 2 and m.last_stats["kept_groups"] == 4
    assert m.rollouts_per_step(4) == 24 <= m.last_stats["rollouts"]
    # every group rolled out is traced, the dropped all-correct ones included
    m.observe(out)
    assert set(m.traces) == set(eng.calls[0]) | set(eng.calls[1])
    assert m.traces["q0"] == [[0, 1.0]]
    # deterministic under the step rng
    again = build("greso", {"n": 4, "batch_filling": "adaptive"})
    again.setup(pool, {})
    same = again.rollout(pool[:4], ctx(ScriptedEngine(eng.kinds)), np.random.default_rng(0))
    assert [g.problem_uid for g in same] == [g.problem_uid for g in out]


def test_greso_adaptive_last_round_trains_on_what_it_has():
    # B = 8: 2 always-correct + 6 mixed prompts in the batch; every other prompt always correct
    pool = probs(["1"] * 2 + ["mix"] * 6 + ["1"] * 30)
    eng = ScriptedEngine({p.uid: p.answer for p in pool})
    m = build("greso", {"n": 4, "batch_filling": "adaptive"})
    m.setup(pool, {})
    out = m.rollout(pool[:8], ctx(eng), np.random.default_rng(1))
    # round 0: S = 12 prompts, 6 kept, zv = 0.5; int((8 - 6) * 4 / 0.5 / 4 * 1.25) = 5 <= 12: the
    # next round (5 prompts) is the last one, and the step trains on the 6 groups it has
    assert next_sampling_size(8, 0.5, 4, 12, 2) == (5, True)
    assert [len(c) for c in eng.calls] == [12, 5]
    assert [g.problem_uid for g in out] == [p.uid for p in pool[2:8]]
    assert m.last_stats["kept_groups"] == 6 and m.last_stats["discarded_groups"] == 11
    assert eng.meter.totals("discarded")["sequences"] == 11 * 4


def test_greso_fixed_filling_is_the_default():
    m = build("greso", {})
    assert m.config.batch_filling == "fixed" and m.rollouts_per_step(4) == 32


def test_greso_adaptive_in_the_embedded_trainer(tmp_path):
    from components.data.synthetic import generate_problems
    from components.policy.tokenizer import build_tokenizer
    from components.stages.base import NullTracker
    from components.trainer.embedded import EmbeddedTrainer
    from components.trainer.train_config import TrainConfig
    from tiny import tiny_test_policy

    tok = build_tokenizer()
    problems = generate_problems(12, [3], seed=1)
    parity = lambda texts, golds: [(float(len(t) % 2 == 0), "rule") for t in texts]
    cfg = TrainConfig(method="greso", method_config={"n": 4, "batch_filling": "adaptive"}, steps=2,
                      batch_prompts=4, max_new_tokens=12, val_size=0)
    tr = EmbeddedTrainer(cfg, tiny_test_policy(tok), tok, parity, NullTracker())
    tr.fit(problems, [], {"expert_traces": {}, "p0": {}}, tmp_path)
    rows = [h for h in tr.history if "rollouts" in h]
    assert len(rows) == 2
    for r in rows:
        assert r["rollouts"] == r["method/rollouts"] >= tr.method.rollouts_per_step(4) == 24
        assert r["method/kept_groups"] <= 4
    kept = sum(r["method/kept_groups"] for r in rows) * 4
    assert tr.meter.totals("train_rollout")["sequences"] == kept
    json.dumps(tr.method.state_dict())


# ---------------------------------------------------------------------------- DAPO
def test_dapo_generates_three_train_batches_per_round_by_default():
    pool = probs(["mix"] * 20)
    m = build("dapo", {"n": 4})
    assert m.config.gen_batch_multiplier == 3.0                  # run_dapo_qwen2.5_32b.sh: gen = 3 x train
    m.setup(pool, {})
    eng = ScriptedEngine({p.uid: p.answer for p in pool})
    out = m.rollout(pool[:4], ctx(eng), np.random.default_rng(0))
    assert [len(c) for c in eng.calls] == [12] and eng.calls[0][:4] == [p.uid for p in pool[:4]]
    assert [g.problem_uid for g in out] == eng.calls[0][:4]       # all mixed: the first B kept
    assert eng.meter.totals("discarded")["sequences"] == (12 - 4) * 4
    assert m.rollouts_per_step(4) == 12 * 4 == m.last_stats["rollouts"]
    small = build("dapo", {"n": 4})                                # a training set below 3B prompts
    small.setup(pool[:6], {})
    eng = ScriptedEngine({p.uid: p.answer for p in pool})
    small.rollout(pool[:4], ctx(eng), np.random.default_rng(0))
    assert [len(c) for c in eng.calls] == [6] and small.rollouts_per_step(4) == 6 * 4
    one = build("dapo", {"n": 4, "gen_batch_multiplier": 1.0})
    one.setup(pool, {})
    eng = ScriptedEngine({p.uid: p.answer for p in pool})
    one.rollout(pool[:4], ctx(eng), np.random.default_rng(0))
    assert [len(c) for c in eng.calls] == [4]
    assert copy.deepcopy(one).rollouts_per_step(4) == 16
