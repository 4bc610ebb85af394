"""PG-OPD: the overlap and selection rules by hand, the OPD token advantage, the prefix /
continuation rollout with a real tiny student and teacher, the trainer hook's alignment
(teacher = student gives zero advantages), a trainer step, and the verl settings."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny_test_policy

from components.data.synthetic import generate_problems
from components.methods.pg_opd import (PGOPD, opd_token_advantages, sampled_in_topk, select_continuations,
                                       token_logprobs, topk_overlap)
from components.policy.tokenizer import build_tokenizer
from components.stages.base import NullTracker
from components.trainer.embedded import EmbeddedTrainer
from components.trainer.sequences import build_sequences, response_logprobs
from components.trainer.train_config import TrainConfig

S = [[3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]]
T = [[3.0, 1.0, 2.0, 0.0], [3.0, 2.0, 1.0, 0.0]]


def test_topk_overlap_hand():
    # position 0: {0,1} vs {0,2} -> 1/2; position 1: {3,2} vs {0,1} -> 0
    assert topk_overlap(S, T, 2) == pytest.approx(0.25)
    assert topk_overlap(S, S, 2) == 1.0
    assert topk_overlap(np.zeros((0, 4)), np.zeros((0, 4)), 2) == 0.0
    with pytest.raises(ValueError, match="shapes"):
        topk_overlap(S, T[:1], 2)


def test_sampled_in_topk_hand():
    assert sampled_in_topk([0, 3], T, 2) == 0.5          # 0 in {0,2}; 3 not in {0,1}


def test_select_continuations_hand():
    ov, run = [0.9, 0.1, 0.5, 0.9, 0.7], [True, True, True, False, True]
    # m = round(0.4 * 5) = 2 of the running ones by overlap: 0 (0.9), then 4 (0.7); 3 has stopped
    assert select_continuations(ov, run, 0.4, None) == [True, False, False, False, True]
    assert select_continuations(ov, run, None, 0.5) == [True, False, True, False, True]
    assert select_continuations(ov, run, 0.0, None) == [False] * 5
    assert select_continuations([0.5, 0.5], [True, True], 0.5, None) == [True, False]   # tie: earlier


def test_opd_token_advantage_hand():
    a = opd_token_advantages(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]]), torch.tensor([[1.0, 0.0]]))
    assert a.tolist() == [[0.5, 0.0]]


def test_config_checks():
    with pytest.raises(ValueError, match="inside the prefix"):
        PGOPD.Config(prefix_tokens=8, probe_tokens=16)
    with pytest.raises(ValueError, match="exactly one"):
        PGOPD.Config(threshold=0.5)


@pytest.fixture(scope="module")
def parts():
    tok = build_tokenizer()
    return tok, tiny_test_policy(tok, seed=0), tiny_test_policy(tok, seed=1), generate_problems(8, [3], seed=2)


def make_trainer(parts, teacher, cfg=None, steps=1):
    tok, student, _, probs = parts
    tc = TrainConfig(method="pg_opd", method_config=cfg or {"n": 2, "prefix_tokens": 4, "probe_tokens": 4},
                     steps=steps, batch_prompts=4, max_new_tokens=12, val_size=2, val_samples=1, seed=1, ckpt_every=5)
    t = EmbeddedTrainer(tc, copy.deepcopy(student), tok, lambda xs, gs: [(0.0, "none")] * len(xs), NullTracker())
    t.method.setup(probs, {"tokenizer": tok, "teacher": teacher})
    return t


def rollout(t, parts):
    with t.meter.tagged(step=0):
        return t.method.rollout(parts[3][:4], t.rollout_ctx(0, 1), np.random.default_rng(0))


def test_token_logprobs_match_the_trainers(parts):
    tok, student, _, _ = parts
    seqs = [(5, 6, 7, 8, 9), (5, 6, 10)]
    lp, win = token_logprobs(student, seqs, [3, 2], tok.pad_token_id, (0, 2))
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 10, tok.pad_token_id, tok.pad_token_id]])
    att = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with torch.no_grad():
        ref, _ = response_logprobs(student, ids, att)
    assert lp[0] == pytest.approx(ref[0, 3:5].tolist(), abs=1e-5)
    assert lp[1] == pytest.approx(ref[1, 2:3].tolist(), abs=1e-5)
    assert win[0].shape[0] == 2 and win[1].shape[0] == 1           # window clipped to the response


def test_prefix_probe_and_continuations(parts):
    t = make_trainer(parts, parts[2])
    groups = rollout(t, parts)
    st = t.method.step_stats()
    probes = sum(g.n for g in groups)
    assert probes == 8 and t.meter.totals()["sequences"] == st["rollouts"] == probes + st["continued"]
    assert 0 < st["continued"] <= round(0.5 * probes)
    assert t.meter.totals()["generated_tokens"] == sum(len(r) for g in groups for r in g.responses)
    for g in groups:
        assert all(0.0 <= o <= 1.0 for o in g.meta["pgopd_overlap"])
        for r, f in zip(g.responses, g.finish_reasons):
            assert len(r) == 4 if f == "pruned" else (f == "stop" or len(r) == 12)
    assert any(f == "pruned" for g in groups for f in g.finish_reasons)
    plain = make_trainer(parts, parts[2], {"n": 2, "prune": False, "prefix_tokens": 4, "probe_tokens": 4})
    pg = rollout(plain, parts)
    assert plain.meter.totals()["sequences"] == 8 and all(f != "pruned" for g in pg for f in g.finish_reasons)


def test_self_teacher_gives_zero_advantages_through_the_hook(parts):
    t = make_trainer(parts, parts[1])           # the teacher is the student itself
    groups = rollout(t, parts)
    flags = t.method.token_advantage_groups(groups)
    assert all(flags)
    seqs = build_sequences(groups, parts[0].pad_token_id)
    rows = torch.arange(len(seqs))
    with torch.no_grad():
        logp, ent = response_logprobs(t.model, seqs.input_ids, seqs.attention, with_entropy=True)
    a = t.method.token_advantages(ent, seqs.response_mask, seqs.rewards, rows=rows, logp=logp)
    assert a.abs().max() < 1e-4
    with pytest.raises(ValueError, match="must pass rows"):
        t.method.token_advantages(ent, seqs.response_mask, seqs.rewards)


def test_trainer_step_moves_the_student_toward_the_teacher(parts):
    t = make_trainer(parts, parts[2])
    groups = rollout(t, parts)
    seqs = build_sequences(groups, parts[0].pad_token_id)
    teacher = t.method.teacher

    def reverse_kl_estimate():
        with torch.no_grad():
            s, _ = response_logprobs(t.model, seqs.input_ids, seqs.attention)
            q, _ = response_logprobs(teacher, seqs.input_ids, seqs.attention)
        m = seqs.response_mask
        return float(((s - q) * m).sum() / m.sum())

    before = reverse_kl_estimate()
    t.method.observe(groups)
    stats = t.update(groups)
    assert stats["trained_sequences"] == len(seqs) and stats["grad_norm"] > 0
    assert reverse_kl_estimate() < before


def test_no_teacher_fails_loudly(parts):
    m = PGOPD(PGOPD.Config())
    with pytest.raises(ValueError, match="no teacher"):
        m.setup(parts[3], {"tokenizer": parts[0]})


def test_verl_distillation_settings_exist_in_verl_config():
    scale = Path(__file__).resolve().parents[2] / ".venv-scale"
    yaml_path = next(scale.glob("lib/python3*/site-packages/verl/trainer/config/_generated_ppo_trainer.yaml"), None)
    # the stamp is written when the install has finished (.ci/run installs it while the suite runs)
    if yaml_path is None or not any(scale.glob(".installed-*")):
        pytest.skip("verl 0.9.1 is not installed here (.venv-scale: make scale-env)")
    import yaml

    cfg = yaml.safe_load(yaml_path.read_text())
    for item in PGOPD(PGOPD.Config()).verl_overrides("/models/teacher"):
        key, _, value = item.partition("=")
        node = cfg
        for part in key.split("."):
            assert part in node, f"{key}: no '{part}' in verl's config"
            node = node[part]
        assert not isinstance(node, dict), key
    assert cfg["distillation"]["distillation_loss"]["loss_mode"] == "k3"     # we override to k1


# ---------------------------------------------------------------------------- the sweep names the teacher
def _sweep(teacher):
    from components.sweep import parse_sweep

    return parse_sweep({"name": "opd", "executor": "local", "seeds": [0], "models": ["tiny", "tiny_long"],
                        "model_specs": {"tiny": {}, "tiny_long": {"steps": 600}}, "methods": ["grpo", "pg_opd"],
                        "method_config": {"pg_opd": {"teacher": teacher}}}, "opd.yaml")


def test_sweep_teacher_becomes_the_train_stage_input():
    from components.stage_graph import calls

    cfg = _sweep("tiny_long")
    up = {"models": [{"model": m, "uri": f"file:///pre/{m}"} for m in cfg.models],
          "hard": [{"model": m, "uri": f"file:///hard/{m}"} for m in cfg.models],
          "prefixes": [{"model": m, "uri": f"file:///pfx/{m}"} for m in cfg.models]}
    by_key = {c["cell"]: c["inputs"] for c in calls(cfg, "train", up)}
    assert by_key["tiny-pg_opd-s0"]["teacher"] == "file:///pre/tiny_long"
    assert by_key["tiny-pg_opd-s0"]["model"] == "file:///pre/tiny"
    assert "teacher" not in by_key["tiny-grpo-s0"]


def test_sweep_teacher_must_be_a_sweep_model():
    from components.sweep import SweepError

    with pytest.raises(SweepError, match="method_config.pg_opd.teacher"):
        _sweep("huge")


def test_train_stage_declares_an_optional_teacher_input():
    import fnmatch

    from components.stages import train

    assert all(any(fnmatch.fnmatch(n, p) for p in train.INPUTS) for n in ("model", "hard", "prefixes", "teacher"))
    assert "teacher" not in train.INPUTS      # optional: a glob, not a required name


def test_teacher_only_model_is_pretrained_and_evaluated_never_filtered_or_trained():
    from components.stage_graph import calls
    from components.sweep import parse_sweep

    cfg = parse_sweep({"name": "opd", "seeds": [0], "models": ["tiny"], "teachers": ["tiny_long"],
                       "model_specs": {"tiny": {}, "tiny_long": {"steps": 600}}, "methods": ["grpo", "pg_opd"],
                       "method_config": {"pg_opd": {"teacher": "tiny_long"}}}, "opd.yaml")
    pre = calls(cfg, "pretrain", {"data": {"uri": "file:///data"}})
    assert [(c["extra"]["model"], c["params"]) for c in pre] == [("tiny", {}), ("tiny_long", {"steps": 600})]
    models = [{"model": c["extra"]["model"], "uri": f"file:///pre/{c['extra']['model']}"} for c in pre]
    hard = calls(cfg, "filter_hard", {"data": {"uri": "file:///data"}, "models": models})
    assert [c["extra"]["model"] for c in hard] == ["tiny"]
    up = {"models": models, "hard": [{"model": "tiny", "uri": "file:///hard/tiny"}],
          "prefixes": [{"model": "tiny", "uri": "file:///pfx/tiny"}]}
    trains = calls(cfg, "train", up)
    assert [c["cell"] for c in trains] == ["tiny-grpo-s0", "tiny-pg_opd-s0"]
    assert trains[1]["inputs"]["teacher"] == "file:///pre/tiny_long"
    evals = calls(cfg, "evaluate", {**up, "trains": [{"key": c["cell"], "uri": f"file:///run/{c['cell']}"}
                                                     for c in trains]})
    assert [c["cell"] for c in evals] == ["tiny-grpo-s0", "tiny-pg_opd-s0", "tiny-base", "tiny-teacher-tiny-long"]
    # the teacher scores the student's held-out set; its tables row is named after it
    teacher = evals[-1]
    assert teacher["inputs"] == {"model": "file:///pre/tiny_long", "hard": "file:///hard/tiny"}
    assert teacher["params"]["base_name"] == "teacher-tiny-long"
    assert "base_name" not in evals[2]["params"]              # the base row's cache key is unchanged
