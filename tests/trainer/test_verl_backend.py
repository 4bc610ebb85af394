"""The verl backend without Ray workers: config composition, Groups -> DataProto, verl's
uid-grouped advantages against ours, and the DataProto rollout engine (the trainer, stage, CLI
and scripts: test_verl_stage.py)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from components.algos.advantages import grpo_advantages, rloo_advantages
from components.engine.base import Request, SamplingParams, TokenMeter
from components.methods.base import Group, RolloutContext
from components.trainer.train_config import TrainConfig
from verl_generate import HFGenerateSequences, tiny_policy

ROOT = Path(__file__).resolve().parents[2]
torch.set_num_threads(2)


# ---------------------------------------------------------------- config

def test_compose_maps_train_params_onto_verls_config(tmp_path):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from components.trainer.verl import hydra_config as vc

    cfg = TrainConfig(method="vsr", adv_estimator="drgrpo", loss_agg_mode="seq-mean-token-sum-norm",
                      kl_coef=0.01, lr=3e-6, batch_prompts=4, max_new_tokens=48, steps=7, ckpt_every=3,
                      temperature=0.9, top_p=0.95, seed=5)
    assert vc.samples_per_prompt(cfg) == 8        # VSR's default n, from its budget contract
    ov = vc.overrides(cfg, model_path=tmp_path / "m", work_dir=tmp_path / "w", n=8, project="demo",
                      experiment="train-vsr-s5", extra=["trainer.nnodes=1", "actor_rollout_ref.actor.ppo_epochs=2"])
    c = vc.compose(ov)
    OmegaConf.resolve(c)
    a = c.actor_rollout_ref
    assert a.model.path == str((tmp_path / "m").resolve())
    assert a.actor.optim.lr == pytest.approx(3e-6)
    assert (c.data.train_batch_size, a.actor.ppo_mini_batch_size, a.rollout.n) == (4, 4, 8)
    assert (c.data.max_response_length, a.rollout.response_length) == (48, 48)
    assert a.actor.loss_agg_mode == "seq-mean-token-sum-norm" and a.actor.loss_scale_factor == 48
    assert a.actor.use_kl_loss and a.actor.kl_loss_coef == pytest.approx(0.01) and a.actor.kl_loss_type == "low_var_kl"
    assert c.algorithm.adv_estimator == "grpo" and c.algorithm.norm_adv_by_std_in_grpo is False   # Dr. GRPO
    assert (a.rollout.temperature, a.rollout.top_p, a.rollout.name) == (0.9, 0.95, "vllm")
    assert a.rollout.enable_prefix_caching and a.rollout.agent.default_agent_loop == "rlvr_context_ids"
    assert Path(a.rollout.agent.agent_loop_config_path).is_file()
    assert (c.trainer.total_training_steps, c.trainer.save_freq, c.trainer.resume_mode) == (7, 3, "auto")
    assert Path(c.trainer.default_local_dir).is_relative_to((tmp_path / "w").resolve())
    assert list(c.trainer.logger) == ["console", "mlflow"]
    assert (c.trainer.project_name, c.trainer.experiment_name) == ("demo", "train-vsr-s5")
    assert "hf_model" in list(a.actor.checkpoint.save_contents)
    assert a.actor.ppo_epochs == 2                 # extra overrides come last
    assert c.trainer.use_v1 is False
    validate_config(config=c, use_reference_policy=need_reference_policy(c), use_critic=need_critic(c))

    rloo = vc.compose(vc.overrides(TrainConfig(adv_estimator="rloo"), model_path="m", work_dir=tmp_path, n=4,
                                   project="p", experiment="e"))
    assert rloo.algorithm.adv_estimator == "rloo" and rloo.actor_rollout_ref.actor.use_kl_loss is False


def test_train_stage_config_orders_cpu_defaults_then_sweep_overrides(tmp_path):
    """The math train stage's verl config: its cluster fields, the CPU defaults on a machine
    without a GPU, and the sweep's own verl_overrides last (they can undo a CPU default)."""
    from components.stages.train import Params
    from components.trainer.verl.run import build_config

    p = Params(backend="verl", method="grpo", method_config={"n": 4}, batch_prompts=2, max_prompt_length=96,
               verl_overrides=["actor_rollout_ref.rollout.dtype=bfloat16"])
    cfg, c = build_config(p, tmp_path / "m", tmp_path / "w", "demo")
    a = c.actor_rollout_ref
    assert (cfg.method, a.rollout.n, a.rollout.prompt_length, c.data.train_batch_size) == ("grpo", 4, 96, 2)
    assert (c.trainer.project_name, c.trainer.experiment_name) == ("demo", f"train-grpo-s{cfg.seed}")
    if not torch.cuda.is_available():
        assert a.actor.strategy == "fsdp2" and a.rollout.enforce_eager is True
    assert a.rollout.dtype == "bfloat16"            # the sweep's override wins over the CPU default


def test_agent_loops_yaml_names_both_importable_loops():
    """One agent_loops.yaml: the math token-id loop and the episode loop, each name the one the
    requests carry (``agent_name``)."""
    import yaml

    from components.trainer.verl import agent_loop
    from components.trainer.verl.episodes import AGENT_LOOP_NAME as EPISODE_LOOP
    from components.trainer.verl.hydra_config import AGENT_LOOPS_YAML
    from components.trainer.verl.rollout import AGENT_LOOP_NAME as MATH_LOOP
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    entries = {e["name"]: e["_target_"] for e in yaml.safe_load(AGENT_LOOPS_YAML.read_text())}
    want = {MATH_LOOP: agent_loop.ContextIdsAgentLoop, EPISODE_LOOP: agent_loop.EpisodeAgentLoop}
    assert set(entries) == set(want)
    for name, target in entries.items():
        mod, _, cls = target.rpartition(".")
        assert getattr(importlib.import_module(mod), cls) is want[name] and issubclass(want[name], AgentLoopBase)
    components_dir = AGENT_LOOPS_YAML.parents[2]
    assert sorted(components_dir.rglob("*agent_loops*.yaml")) == [AGENT_LOOPS_YAML], "one agent_loops.yaml"


# ---------------------------------------------------------------- batch + advantages

def _groups(rng, sizes=(4, 1, 3, 5), pad_free=True):
    groups = []
    for gi, n in enumerate(sizes):
        prompt = tuple(int(t) for t in rng.integers(3, 30, size=rng.integers(3, 7)))
        prefix = tuple(int(t) for t in rng.integers(3, 30, size=2)) if gi % 2 else ()
        resps = [tuple(int(t) for t in rng.integers(3, 30, size=rng.integers(1, 9))) for _ in range(n)]
        groups.append(Group(uid=f"g{gi}", problem_uid=f"p{gi}", answer="1", context_ids=prompt + prefix,
                            prompt_len=len(prompt), responses=resps, texts=[""] * n,
                            rewards=[float(x) for x in rng.integers(0, 2, size=n)]))
    return groups


def test_groups_to_dataproto_layout():
    from components.trainer.verl.dataproto import groups_to_dataproto

    groups = _groups(np.random.default_rng(0))
    d = groups_to_dataproto(groups, pad_id=0, response_length=10)
    rows = [(g, r, w) for g in groups for r, w in zip(g.responses, g.rewards)]
    P = max(len(g.context_ids) for g in groups)
    assert d.batch["input_ids"].shape == (len(rows), P + 10) and d.batch["responses"].shape == (len(rows), 10)
    for i, (g, resp, reward) in enumerate(rows):
        ids, att = d.batch["input_ids"][i], d.batch["attention_mask"][i]
        assert ids[att.bool()].tolist() == list(g.context_ids) + list(resp)   # prefix on the prompt side
        assert d.batch["response_mask"][i].tolist() == [1] * len(resp) + [0] * (10 - len(resp))
        assert d.batch["position_ids"][i][att.bool()].tolist() == list(range(len(g.context_ids) + len(resp)))
        scores = d.batch["token_level_scores"][i]
        assert scores[len(resp) - 1] == reward and scores.sum() == reward
        assert d.non_tensor_batch["uid"][i] == g.uid
        assert d.non_tensor_batch["prompt_len"][i] == g.prompt_len
    with pytest.raises(ValueError, match="response_length 3"):
        groups_to_dataproto(groups, pad_id=0, response_length=3)


@pytest.mark.parametrize("estimator", ["grpo", "drgrpo", "rloo"])
def test_verl_uid_advantages_equal_ours(estimator):
    from components.trainer.verl.dataproto import groups_to_dataproto, verl_advantages

    rng = np.random.default_rng(1)
    groups = _groups(rng, sizes=(4, 1, 3, 5, 2, 8))
    for g in groups:                               # non-binary rewards exercise the std
        g.rewards = [float(x) for x in rng.normal(size=g.n)]
    d = groups_to_dataproto(groups, pad_id=0)
    perm = rng.permutation(len(d))                 # verl groups by uid, not by position
    d.reorder(torch.tensor(perm))
    adv = verl_advantages(d, estimator)
    rewards = [r for g in groups for r in g.rewards]
    gids = [g.uid for g in groups for _ in range(g.n)]
    ours = (rloo_advantages(rewards, gids) if estimator == "rloo"
            else grpo_advantages(rewards, gids, norm_by_std=(estimator == "grpo")))[perm]
    mask = d.batch["response_mask"].float()
    torch.testing.assert_close(adv, ours.float()[:, None] * mask, rtol=1e-5, atol=1e-5)


def test_method_advantage_terms_follow_the_embedded_rules():
    from components.trainer.verl.dataproto import apply_method_advantages, groups_to_dataproto, verl_advantages

    from components.methods.grpo import GRPO, GRPOConfig

    class Terms(GRPO):
        def sample_advantages(self, group):        # exact per-sample (Reinforce-Ada-Seq)
            return [0.5, -1.0, 2.0] if group is groups[0] else None

        def advantage_weight(self, group):         # per-group weight (Reinforce-Ada-Est)
            return 3.0 if group is groups[2] else 1.0

    groups = _groups(np.random.default_rng(2), sizes=(3, 2, 4))
    d = groups_to_dataproto(groups, pad_id=0)
    base = verl_advantages(d, "grpo")
    d.batch["advantages"] = base.clone()
    apply_method_advantages(d, Terms(GRPOConfig()), groups)
    m = d.batch["response_mask"].float()
    got = d.batch["advantages"]
    torch.testing.assert_close(got[:3], torch.tensor([0.5, -1.0, 2.0])[:, None] * m[:3])
    torch.testing.assert_close(got[3:5], base[3:5])
    torch.testing.assert_close(got[5:], 3.0 * base[5:])


# ---------------------------------------------------------------- rollout engine

@pytest.fixture(scope="module")
def tiny():
    return tiny_policy()


def test_rollout_engine_maps_rows_back_to_requests_and_meters_padding(tiny):
    from components.trainer.verl.rollout import VerlRolloutEngine, sample_seed

    model, tok = tiny
    gen = HFGenerateSequences(model, tok)
    meter = TokenMeter()
    eng = VerlRolloutEngine(gen, tok, meter=meter, divisor=4)
    p = tok.encode("Compute 1+2.", add_special_tokens=False)
    q = tok.encode("Compute 4+5-3.", add_special_tokens=False)
    reqs = [Request(tuple(p), n=2), Request(tuple(q), n=0), Request(tuple(q + tok.encode("4+5=9", add_special_tokens=False)), n=3, prompt_len=len(q))]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=12, seed=11)
    out = eng.generate(reqs, params)
    assert [len(o) for o in out] == [2, 0, 3]
    assert [c.token_ids for o in out for c in o] == gen.rows[:5]        # request order, samples adjacent
    for c in (c for o in out for c in o):
        assert c.text == tok.decode(list(c.token_ids), skip_special_tokens=True)
        assert c.finish_reason == ("stop" if c.token_ids and c.token_ids[-1] == tok.eos_token_id else "length")
    # 5 rows padded to 8: three copies generated and dropped, metered as discarded
    assert len(gen.rows) == 8
    t, dsc = meter.totals("train_rollout"), meter.totals("discarded")
    assert t == {"prompt_tokens": len(reqs[0].context_ids) + len(reqs[2].context_ids),
                 "generated_tokens": sum(len(r) for r in gen.rows[:5]), "sequences": 5, "requests": 3}
    assert dsc["generated_tokens"] == sum(len(r) for r in gen.rows[5:]) and dsc["sequences"] == 3
    # per-sample seeds: distinct within a request, and the same call again gives the same samples
    assert len({sample_seed(11, 0, j) for j in range(2)}) == 2
    again = VerlRolloutEngine(HFGenerateSequences(model, tok), tok, divisor=4).generate(reqs, params)
    assert [[c.token_ids for c in o] for o in again] == [[c.token_ids for c in o] for o in out]


def test_method_sample_groups_run_unchanged_on_the_verl_engine(tiny):
    from components.data.schema import Problem
    from components.methods.registry import build
    from components.trainer.verl.rollout import VerlRolloutEngine

    model, tok = tiny
    eng = VerlRolloutEngine(HFGenerateSequences(model, tok), tok, divisor=3)
    probs = [Problem(uid=f"u{i}", prompt=f"Compute {i}+1.", answer=str(i + 1)) for i in range(3)]
    graded = []

    def grade(texts, golds):
        graded.extend(zip(texts, golds))
        return [(float(t.strip().endswith(g)), "x") for t, g in zip(texts, golds)]

    ctx = RolloutContext(engine=eng, grade=grade, sampling=SamplingParams(1.0, 1.0, 8, 3), step=2,
                         encode_prompt=lambda pr: tuple(tok.encode(pr.prompt, add_special_tokens=False)))
    groups = build("grpo", {"n": 4}).rollout(probs, ctx, np.random.default_rng(0))
    assert [g.n for g in groups] == [4, 4, 4] and len(graded) == 12
    # a replayed prefix (VSR) and per-item counts, as sample_groups builds them
    pre = tok.encode("1+1=", add_special_tokens=False)
    items = [(probs[0], ctx.encode_prompt(probs[0]) + tuple(pre), "1+1=", len(ctx.encode_prompt(probs[0])), "r0"),
             (probs[1], ctx.encode_prompt(probs[1]), "", len(ctx.encode_prompt(probs[1])), "f1")]
    gs = ctx.sample_groups(items, [2, 5])
    assert [g.n for g in gs] == [2, 5] and gs[0].is_replay and not gs[1].is_replay
    assert all(t.startswith("1+1=") for t in gs[0].texts)
    assert eng.meter.totals("train_rollout")["sequences"] == 19
