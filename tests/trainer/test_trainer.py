"""The embedded trainer with the real methods, engine and a tiny random Qwen2 policy.

The reward here is a deterministic rule on the generated text (a test reward, not the
math grader) so that an untrained model gets mixed groups and real gradients.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from components.data.synthetic import generate_problems
from components.stages.base import NullTracker
from components.trainer.sequences import build_sequences, token_weights
from components.trainer.train_config import TrainConfig
from components.trainer.embedded import EmbeddedTrainer
from components.trainer.loop import batch_order


def parity_reward(texts, golds):
    """1 when the response has an even number of characters: ~50 % success, mixed groups."""
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


@pytest.fixture(scope="module")
def problems():
    return generate_problems(12, [3], seed=1)


def make(cfg_kw, model, tok, grade=parity_reward):
    cfg = TrainConfig(**{"steps": 3, "batch_prompts": 4, "max_new_tokens": 16, "val_size": 4, "val_samples": 1,
                         "ckpt_every": 2, "val_every": 2, "lr": 1e-3, **cfg_kw})
    return EmbeddedTrainer(cfg, copy.deepcopy(model), tok, grade, NullTracker())


def resources(problems):
    return {"expert_traces": {p.uid: p.traces[0] for p in problems}, "p0": {}}


def params_equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_vsr_with_rho_zero_is_grpo_bit_for_bit(model, tok, problems, tmp_path):
    g = make({"method": "grpo", "method_config": {"n": 4}}, model, tok)
    v = make({"method": "vsr", "method_config": {"n": 4, "rho": 0.0}}, model, tok)
    g.fit(problems, problems[:4], resources(problems), tmp_path / "g")
    v.fit(problems, problems[:4], resources(problems), tmp_path / "v")
    assert params_equal(g.model, v.model)
    assert not params_equal(g.model, model)          # it did learn something
    strip = lambda h: [{k: x for k, x in r.items() if not k.startswith(("time/", "method/"))} for r in h]
    assert strip(g.history) == strip(v.history)
    assert g.meter.totals("train_rollout") == v.meter.totals("train_rollout")


def test_vsr_replays_prefixes_that_stay_out_of_the_loss(model, tok, problems, tmp_path):
    v = make({"method": "vsr", "method_config": {"n": 4, "rho": 0.5}}, model, tok)
    v.method.setup(problems, {**resources(problems), "tokenizer": tok})
    groups = v.method.rollout(problems[:4], v.rollout_ctx(0, 0), np.random.default_rng(0))
    replays = [g for g in groups if g.is_replay]
    assert len(replays) == 2 and len(groups) == 4
    seqs = build_sequences(groups, tok.pad_token_id)
    row = 0
    for g in groups:
        for resp in g.responses:
            m = seqs.response_mask[row]
            assert m[: len(g.context_ids)].sum() == 0                  # prompt + replayed prefix: context
            assert m.sum() == len(resp)                                # exactly the generated tokens
            row += 1
    for g in replays:
        prefix_text = tok.decode(list(g.context_ids[g.prompt_len:]))
        assert all(t.startswith(prefix_text) for t in g.texts)        # graded answer includes the prefix
        assert 0 < g.meta["alpha"] < 1 and g.meta["source"] == "expert"
    # replayed prefixes are prompt-side tokens for the meter, never generated ones
    gen = sum(len(r) for g in groups for r in g.responses)
    assert v.meter.totals("train_rollout")["generated_tokens"] == gen
    assert v.meter.totals("train_rollout")["prompt_tokens"] == sum(len(g.context_ids) for g in groups)


def test_resume_after_crash_continues_identically(model, tok, problems, tmp_path):
    kw = {"method": "vsr", "method_config": {"n": 4, "rho": 0.5}, "steps": 4}
    full = make(kw, model, tok)
    full.fit(problems, problems[:4], resources(problems), tmp_path / "full")

    class Crash(Exception):
        pass

    def crash(step):
        if step == 2:        # after the step-1 checkpoint (ckpt_every=2), before the next one
            raise Crash

    first = make(kw, model, tok)
    with pytest.raises(Crash):
        first.fit(problems, problems[:4], resources(problems), tmp_path / "crash", on_step=crash)
    resumed = make(kw, model, tok)
    resumed.fit(problems, problems[:4], resources(problems), tmp_path / "crash")
    assert params_equal(full.model, resumed.model)
    assert full.method.state_dict() == resumed.method.state_dict()
    assert full.meter.totals() == resumed.meter.totals()
    strip = lambda h: [{k: x for k, x in r.items() if not k.startswith("time/")} for r in h]
    assert strip(full.history) == strip(resumed.history)
    # the written records hold no wall-clock field, so two runs of one config are byte-identical
    full.write_records(tmp_path / "full")
    resumed.write_records(tmp_path / "crash")
    for name in ("metrics.jsonl", "tokens.json", "method_state.json", "summary.json"):
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "crash" / name).read_bytes(), name


def test_sft_trains_on_expert_traces_only(model, tok, problems, tmp_path):
    s = make({"method": "sft"}, model, tok)
    s.method.setup(problems[:2], {"expert_traces": {problems[0].uid: problems[0].traces[0]}, "tokenizer": tok})
    assert s.method.training_problems(problems[:2]) == [problems[0]]
    groups = s.method.rollout(problems[:2], s.rollout_ctx(0, 0), np.random.default_rng(0))
    assert len(groups) == 1 and groups[0].supervised
    assert tok.decode(list(groups[0].responses[0]), skip_special_tokens=True) == problems[0].traces[0]
    assert s.meter.totals()["generated_tokens"] == 0
    before = s.update(groups)["loss"]
    for _ in range(5):
        after = s.update(groups)["loss"]
    assert after < before


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                  "seq-mean-token-sum-norm"])
def test_token_weights_match_verl_agg_loss(mode):
    from verl.trainer.ppo import core_algos

    g = torch.Generator().manual_seed(0)
    loss = torch.randn(6, 10, generator=g)
    mask = (torch.rand(6, 10, generator=g) > 0.3).float()
    mask[2] = 0.0                                   # a fully masked sequence is excluded
    ref = core_algos.agg_loss(loss, mask, mode)
    ours = (loss * token_weights(mask, mode, horizon=10)).sum()
    assert torch.allclose(ours, ref, atol=1e-6)


def test_batch_order_covers_each_epoch_once():
    seen = [i for s in range(5) for i in batch_order(10, seed=3, step=s, batch=4)]
    assert sorted(seen[:10]) == list(range(10))           # first epoch: a permutation
    assert batch_order(10, 3, 2, 4) == batch_order(10, 3, 2, 4)
    assert batch_order(10, 3, 0, 4) != batch_order(10, 4, 0, 4)


def test_embedded_path_imports_nothing_from_verl():
    """What ``train`` with ``backend: embedded`` imports, in a fresh interpreter: no verl."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import components.stages.train, components.stages.common, components.trainer.embedded\n"
            "import components.engine.hf, components.data.schema\n"
            "from components.stages.train import Params\n"
            "from components.trainer.train_config import train_config_of\n"
            "train_config_of(Params(method='vsr', threads=1))\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'verl' or m.startswith('components.trainer.verl'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_both_backends_run_the_one_loop():
    """The verl trainer inherits the loop; it defines none of the loop's own steps."""
    from components.trainer.loop import FitLoop
    from components.trainer.verl.trainer import RLVRPPOTrainer

    assert issubclass(EmbeddedTrainer, FitLoop) and issubclass(RLVRPPOTrainer, FitLoop)
    for cls in (EmbeddedTrainer, RLVRPPOTrainer):
        for name in ("run_loop", "validation_metrics", "summary", "write_records", "_log"):
            assert getattr(cls, name) is getattr(FitLoop, name), (cls.__name__, name)
        for name in ("rollout_ctx", "update", "restore", "save_checkpoint", "log_metrics"):
            assert getattr(cls, name) is not getattr(FitLoop, name), (cls.__name__, name)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                  "seq-mean-token-sum-norm"])
def test_micro_batched_pg_loss_is_clipped_pg_loss(mode):
    """The embedded update's loss (per-token losses of ``pg_token_losses`` times the full
    batch's ``token_weights``, summed over micro-batches) is ``clipped_pg_loss``, log-ratio
    clamp and dual clip included."""
    from components.algos.losses import CLIP_RATIO_C, clipped_pg_loss, pg_token_losses

    g = torch.Generator().manual_seed(1)
    logp = -torch.rand(6, 9, generator=g) * 3
    old = logp + torch.randn(6, 9, generator=g) * 1.5        # ratios far outside the clip range
    old[0, 0] = logp[0, 0] - 30.0                            # a log-ratio the clamp cuts at 20
    adv = torch.randn(6, generator=g)
    mask = (torch.rand(6, 9, generator=g) > 0.2).float()
    ref, stats = clipped_pg_loss(logp, old, adv, mask, 0.2, 0.28, agg=mode, loss_scale_factor=9)
    w = token_weights(mask, mode, horizon=9)
    total, clipped = 0.0, 0.0
    for rows in (slice(0, 4), slice(4, 6)):                  # two micro-batches
        pg, is_clipped, _, _ = pg_token_losses(logp[rows], old[rows], adv[rows][:, None], 0.2, 0.28, CLIP_RATIO_C)
        total = total + (pg * w[rows]).sum()
        clipped += float((is_clipped.float() * mask[rows]).sum())
    assert stats["clipfrac_lower"] > 0                       # the dual clip is active somewhere
    torch.testing.assert_close(total, ref)
    assert clipped / float(mask.sum()) == pytest.approx(stats["clipfrac"], abs=1e-6)


def test_step_tokens_add_up_to_the_summary_with_discarded_groups(model, tok, problems, tmp_path):
    """DAPO drops uniform groups (meter purpose "discarded"): the per-step tokens/generated, the
    cumulative curve, the summary and the tokens stage all count kept + discarded tokens, so a
    plot of tokens/generated_cum ends at the table's number."""
    from analysis.tokens import run_tokens
    d = make({"method": "dapo", "method_config": {"n": 4, "gen_batch_multiplier": 2.0}}, model, tok,
             grade=lambda texts, golds: [(float(len(t) % 3 == 0), "rule") for t in texts])
    summary = d.fit(problems, [], resources(problems), tmp_path / "d")
    steps = [h for h in d.history if "tokens/generated" in h]
    assert len(steps) == 3 and summary["discarded_tokens"] > 0       # some group was uniform and dropped
    assert sum(h["tokens/generated"] for h in steps) == summary["generated_tokens"] == steps[-1]["tokens/generated_cum"]
    assert sum(h["tokens/discarded"] for h in steps) == summary["discarded_tokens"]
    assert summary["kept_generated_tokens"] + summary["discarded_tokens"] == summary["generated_tokens"]
    table = run_tokens(summary, d.meter.to_rows(), updates=3)
    assert (table["generated_tokens"], table["discarded_tokens"]) == (summary["generated_tokens"], summary["discarded_tokens"])
    assert table["rollouts"] == summary["rollouts"]
