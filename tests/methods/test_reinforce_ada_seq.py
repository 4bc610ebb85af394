"""Reinforce-Ada-Seq (docs/methods.md §5a, the authors' verl code).

TV7 and the exit / downsampling / fallback rules on a scripted reward stream with a fake
engine (exact and fast), then the method on a tiny random policy with the real engine:
token accounting, determinism, state round trip, two steps of the embedded trainer.
"""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from components.data.prompting import encode_prompt
from components.data.synthetic import generate_problems
from components.engine.base import Completion, SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.methods.base import RolloutContext
from components.methods.reinforce_ada import ReinforceAdaSeq, global_stats, seq_keep_counts
from components.methods.registry import build
from components.stages.base import NullTracker
from components.trainer.train_config import TrainConfig
from components.trainer.embedded import EmbeddedTrainer


# ---------------------------------------------------------------- fake engine + scripted rewards
class FakeEngine:
    """Deterministic completions of varying length; meters every call like HFEngine."""

    def __init__(self):
        self.meter = TokenMeter()
        self.tokenizer = None
        self.calls: list[tuple[list[int], int | None]] = []   # (n per request, seed) per call
        self.k = 0
        self.gen_tokens = self.gen_seqs = 0

    def generate(self, requests, params, purpose="train_rollout"):
        self.calls.append(([r.n for r in requests], params.seed))
        out = []
        for r in requests:
            comps = []
            for _ in range(r.n):
                L = 1 + self.k % 5
                comps.append(Completion(token_ids=tuple(range(100 + self.k, 100 + self.k + L)),
                                        text=f"s{self.k}", finish_reason="stop"))
                self.k += 1
            out.append(comps)
        gen = sum(len(c.token_ids) for cs in out for c in cs)
        seqs = sum(r.n for r in requests)
        self.gen_tokens += gen
        self.gen_seqs += seqs
        self.meter.record(purpose, sum(len(r.context_ids) for r in requests if r.n > 0), gen, seqs,
                          requests=len(requests))
        return out


class Script:
    """A grader returning the scripted rewards in call order (one per graded sample)."""

    def __init__(self, stream):
        self.stream = list(stream)
        self.pos = 0

    def __call__(self, texts, golds):
        out = self.stream[self.pos:self.pos + len(texts)]
        assert len(out) == len(texts), "reward stream exhausted"
        self.pos += len(texts)
        return [(float(r), "script") for r in out]


PROBS = generate_problems(8, [3], seed=2)


def fake_run(cfg, stream, B=1, step=0, seed=0):
    eng = FakeEngine()
    ctx = RolloutContext(engine=eng, grade=Script(stream), encode_prompt=lambda p: (1, 2, 3),
                         sampling=SamplingParams(1.0, 1.0, 8, seed), step=step)
    m = build("reinforce_ada_seq", cfg)
    groups = m.rollout(PROBS[:B], ctx, np.random.default_rng(0))
    return m, groups, eng


def check_accounting(groups, eng):
    meter = eng.meter
    train, disc = meter.totals("train_rollout"), meter.totals("discarded")
    assert train["generated_tokens"] == sum(len(r) for g in groups for r in g.responses)
    assert train["sequences"] == sum(g.n for g in groups)
    assert train["generated_tokens"] + disc["generated_tokens"] == eng.gen_tokens
    assert train["sequences"] + disc["sequences"] == eng.gen_seqs


# ---------------------------------------------------------------- TV7
TV7 = [0] * 8 + [0, 0, 1, 0, 0, 0, 0, 1] + [1] * 16     # the tail must never be read


def test_tv7_balanced_exits_after_two_rounds():
    m, groups, eng = fake_run({"max_rounds": 4, "round_repeat": 8, "final_keep": 4, "choice": "balanced"}, TV7)
    assert len(eng.calls) == 2 and m.last_stats["rollouts"] == 16 and m.last_stats["gen_rounds"] == 2
    (g,) = groups
    assert g.meta["generated"] == 16 and g.meta["rounds"] == 2 and g.meta["finished"]
    assert g.meta["p_hat"] == 0.125 and g.meta["global_mean"] == 0.125
    assert (g.meta["total_pos"], g.meta["total_neg"]) == (2, 14)
    assert g.rewards == [1.0, 1.0, 0.0, 0.0]
    assert g.meta["kept_idx"] == [10, 15, 0, 1]                  # positives first, each in generation order
    assert g.meta["round_of_sample"] == [1, 1, 0, 0]
    assert g.meta["advantages"] == pytest.approx([0.875, 0.875, -0.125, -0.125], abs=1e-12)
    assert g.texts == ["s10", "s15", "s0", "s1"]
    check_accounting(groups, eng)
    assert eng.meter.totals("discarded")["sequences"] == 12


def test_tv7_with_std_normalisation():
    m, (g,), _ = fake_run({"norm_adv_by_std": True}, TV7)
    std = math.sqrt(2 * 14 / (16 * 15))                          # torch.std of 2 ones + 14 zeros
    assert g.meta["global_std"] == pytest.approx(std, abs=1e-12)
    want = [(r - 0.125) / (std + 1e-6) for r in [1, 1, 0, 0]]
    assert g.meta["advantages"] == pytest.approx(want, abs=1e-12)
    assert want[0] == pytest.approx(2.561738, abs=1e-5)


def test_local_stats_mode_sets_no_advantages():
    _, (g,), _ = fake_run({"global_stat_est": False}, TV7)
    assert "advantages" not in g.meta and g.rewards == [1.0, 1.0, 0.0, 0.0]


# ---------------------------------------------------------------- rounds, exits, fallback
def test_rounds_sample_only_active_prompts_with_round_seed_offsets():
    # prompt 0: 4 positives + 4 negatives in round 0 -> exits; prompt 1: all zeros, 4 rounds
    stream = [1, 0, 1, 0, 1, 0, 1, 0] + [0] * 8 + [0] * 8 * 3
    m, groups, eng = fake_run({}, stream, B=2, seed=5)
    assert [ns for ns, _ in eng.calls] == [[8, 8], [8], [8], [8]]
    assert [s for _, s in eng.calls] == [5, 6, 7, 8]             # seed + step*1_000_003 + round
    g0, g1 = groups
    assert g0.rewards == [1, 1, 0, 0] and g0.meta["kept_idx"] == [0, 2, 1, 3] and g0.meta["rounds"] == 1
    assert g0.meta["advantages"] == pytest.approx([0.5, 0.5, -0.5, -0.5])
    assert not g1.meta["finished"] and g1.meta["generated"] == 32 and g1.meta["rounds"] == 4
    assert g1.rewards == [0, 0, 0, 0] and g1.meta["kept_idx"] == [0, 1, 2, 3]
    assert g1.meta["advantages"] == [0.0] * 4
    assert m.last_stats == {"gen_rounds": 4.0, "rollouts": 40.0, "finished_prompts": 1.0,
                            "fallback_prompts": 1.0, "kept": 8.0}
    check_accounting(groups, eng)
    assert eng.meter.totals("discarded")["sequences"] == 40 - 8


def test_positive_focused_exit_and_fallback():
    # one positive in round 0 -> exit; keep it plus the first 3 negatives
    m, (g,), eng = fake_run({"choice": "positive_focused"}, [0, 0, 0, 0.8, 0, 0, 0, 0])
    assert len(eng.calls) == 1 and g.rewards == [0.8, 0, 0, 0] and g.meta["kept_idx"] == [3, 0, 1, 2]
    assert g.meta["advantages"] == pytest.approx([0.8 - 0.125, -0.125, -0.125, -0.125])
    # 0.7 is not > 0.7: never positive -> fallback after max_rounds keeps negatives only
    m, (g,), eng = fake_run({"choice": "positive_focused", "max_rounds": 2, "round_repeat": 1}, [0.7, 0.0])
    assert len(eng.calls) == 2 and g.rewards == [0.7, 0.0] and g.meta["total_pos"] == 0
    assert g.meta["advantages"] == pytest.approx([0.7, 0.0])       # mean 0 over two negatives
    # a single sample: total <= 1 -> mean 0, std 1
    m, (g,), _ = fake_run({"max_rounds": 1, "round_repeat": 1, "norm_adv_by_std": True}, [1.0])
    assert g.rewards == [1.0] and g.meta["advantages"] == pytest.approx([1 / (1 + 1e-6)])


@pytest.mark.parametrize("args,expected", [
    # exit (finished): first n//2 positives, the rest negatives, shortfall filled by positives
    ((2, 14, 4, "balanced", True), (2, 2)),
    ((10, 2, 4, "balanced", True), (2, 2)),
    ((2, 3, 5, "balanced", True), (2, 3)),
    ((7, 3, 5, "balanced", True), (2, 3)),
    ((1, 7, 4, "positive_focused", True), (1, 3)),
    ((8, 0, 4, "positive_focused", True), (4, 0)),
    ((3, 1, 4, "positive_focused", True), (3, 1)),
    # fallback (not finished): take = min(n, total)
    ((1, 30, 4, "balanced", False), (1, 3)),
    ((0, 32, 4, "balanced", False), (0, 4)),
    ((3, 1, 4, "balanced", False), (3, 1)),
    ((1, 1, 4, "balanced", False), (1, 1)),
    ((0, 2, 4, "positive_focused", False), (0, 2)),
    ((1, 9, 4, "positive_focused", False), (1, 3)),      # ceil(0.1*4) = 1
    ((3, 1, 4, "positive_focused", False), (3, 1)),      # ceil(0.75*4) = 3 = take - 1
    ((4, 0, 4, "positive_focused", False), (4, 0)),      # min(4, take-1) = 3, filled back to 4
    ((2, 1, 4, "positive_focused", False), (2, 1)),      # take 3: ceil(8/3) = 3 -> min(3, 2) = 2
    ((0, 1, 4, "positive_focused", False), (0, 1)),      # take 1: target_pos = max(min(0, 0), 1) = 1
])
def test_seq_keep_counts(args, expected):
    assert seq_keep_counts(*args) == expected


def test_global_stats():
    assert global_stats(2, 14) == pytest.approx((0.125, math.sqrt(28 / 240)))
    assert global_stats(0, 8) == (0.0, 1e-6)                      # std clamped at eps
    assert global_stats(1, 0) == (0.0, 1.0) and global_stats(0, 1) == (0.0, 1.0)
    r = np.array([1.0] * 3 + [0.0] * 5)
    assert global_stats(3, 5) == pytest.approx((r.mean(), r.std(ddof=1)))


# ---------------------------------------------------------------- real engine, tiny policy
def rule_reward(texts, golds):
    return [(float(len(t) % 3 == 0), "rule") for t in texts]


CFG = {"round_repeat": 4, "final_keep": 4}


def real_run(model, tok, step=0, method=None):
    eng = HFEngine(model, tok, meter=TokenMeter())
    ctx = RolloutContext(engine=eng, grade=rule_reward, encode_prompt=lambda p: encode_prompt(p, tok, "raw"),
                         sampling=SamplingParams(1.0, 1.0, 12, 3), step=step)
    m = method or build("reinforce_ada_seq", CFG)
    with eng.meter.tagged(step=step):
        groups = m.rollout(PROBS[:4], ctx, np.random.default_rng([3, step, 17]))
    return m, groups, eng


def test_real_engine_accounting_determinism_state(model, tok):
    m, groups, eng = real_run(model, tok)
    meter = eng.meter
    train, disc = meter.totals("train_rollout"), meter.totals("discarded")
    by_all = meter.totals()
    assert by_all["sequences"] == m.last_stats["rollouts"] >= m.rollouts_per_step(4) == 16
    assert by_all["sequences"] <= 4 * 16
    assert m.last_stats["gen_rounds"] > 1                          # the multi-round path is exercised
    assert train["generated_tokens"] == sum(len(r) for g in groups for r in g.responses)
    assert train["sequences"] == sum(g.n for g in groups) == 4 * len(groups)
    assert disc["generated_tokens"] == by_all["generated_tokens"] - train["generated_tokens"]
    assert disc["sequences"] == m.last_stats["rollouts"] - train["sequences"]
    assert len({g.uid for g in groups}) == len(groups) == 4
    for g in groups:
        assert len(g.rewards) == len(g.texts) == len(g.reasons) == len(g.finish_reasons) == len(g.responses)
        assert len(g.meta["advantages"]) == g.n
        mean = g.meta["total_pos"] / g.meta["generated"] if g.meta["generated"] > 1 else 0.0
        assert g.meta["advantages"] == pytest.approx([r - mean for r in g.rewards])
        assert g.rewards == sorted(g.rewards, reverse=True)    # positives first
    # deterministic under the seed
    _, again, _ = real_run(model, tok)
    summ = lambda gs: [(g.uid, g.responses, g.rewards, g.meta["advantages"]) for g in gs]
    assert summ(again) == summ(groups)
    # stateless: JSON state round trip, and a restored method behaves the same
    m.observe(groups)
    state = json.loads(json.dumps(m.state_dict()))
    fresh = build("reinforce_ada_seq", CFG)
    fresh.load_state_dict(state)
    assert json.loads(json.dumps(fresh.state_dict())) == state
    assert summ(real_run(model, tok, step=1, method=fresh)[1]) == summ(real_run(model, tok, step=1, method=m)[1])


def test_embedded_trainer_runs_two_steps(model, tok, tmp_path):
    assert isinstance(build("reinforce_ada_seq"), ReinforceAdaSeq)
    cfg = TrainConfig(method="reinforce_ada_seq", method_config=CFG, steps=2, batch_prompts=4, max_new_tokens=12,
                      val_size=2, val_samples=1, adv_estimator="drgrpo")
    tr = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, rule_reward, NullTracker())
    out = tr.fit(PROBS, PROBS[:2], {"expert_traces": {}, "p0": {}}, tmp_path)
    rows = [h for h in tr.history if "train/loss" in h]
    assert len(rows) == 2 and out["steps"] == 2
    assert all(math.isfinite(h["train/loss"]) for h in rows)
    assert rows[-1]["rollouts"] == tr.method.last_stats["rollouts"]
    assert all(h["rollouts"] >= tr.method.rollouts_per_step(4) for h in rows)
    assert rows[-1]["method/rollouts"] == tr.method.last_stats["rollouts"]
    # every generated sample is a rollout (the tokens stage counts them so); the kept ones,
    # n per prompt, stay under "train_rollout"
    assert out["rollouts"] == sum(h["rollouts"] for h in rows)
    assert tr.meter.totals("train_rollout")["sequences"] == sum(4 * 4 for _ in rows)
