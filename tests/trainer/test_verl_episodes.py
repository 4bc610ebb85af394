"""The agentic verl backend without Ray workers: episode requests, the real ``EpisodeAgentLoop``
behind a ``generate_sequences`` that samples from a real tiny policy, the training rows of both
layouts (observation tokens never carry advantage), the trainer's loop with GiGPO and VSR replay
(the actor update and verl's checkpoint files replaced: ``tests/scale/test_verl_agentic.py`` runs
them for real), its resume, and the stage's config composition."""
from __future__ import annotations

import aio
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tiny import TINY_TEST_POLICY

from components.agentic.policy import build_agent_tokenizer
from components.agentic.rollout import Start, prompt_encoder
from components.engine.base import Request, SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.envs import make_env, replay
from components.policy.model import TinyPolicyConfig, build_policy

ENV = {"env": "sokoban", "config": {"num_boxes": 1, "max_steps": 4, "template": "compact"}}
torch.set_num_threads(2)


def make():
    return make_env(ENV["env"], **ENV["config"])


@pytest.fixture(scope="module")
def policy():
    tok = build_agent_tokenizer(max_positions=1024)
    model = build_policy(TinyPolicyConfig(**{**TINY_TEST_POLICY, "max_positions": 1024}), tok, seed=3).eval()
    return model, tok


class Server:
    """The vLLM server manager's ``generate``, a real model behind it."""

    def __init__(self, model, tok):
        self.hf = HFEngine(model, tok)

    async def generate(self, request_id, prompt_ids, sampling_params, priority=0):
        s = sampling_params
        (c,), = self.hf.generate([Request(tuple(prompt_ids))],
                                 SamplingParams(s.get("temperature", 1.0), s.get("top_p", 1.0), int(s["max_tokens"]),
                                                s.get("seed")))
        return SimpleNamespace(token_ids=list(c.token_ids), log_probs=None, num_preempted=0)


class EpisodeGenerateSequences:
    """verl's ``AgentLoopManager.generate_sequences`` for our rows: the real ``EpisodeAgentLoop``
    per row (kwargs from ``non_tensor_batch``, as verl's worker passes them), outputs padded and
    the extra fields stacked into 1-D object arrays the way verl's ``_postprocess`` does."""

    def __init__(self, model, tok, response_length):
        from components.trainer.verl.agent_loop import EpisodeAgentLoop

        self.loop = object.__new__(EpisodeAgentLoop)      # verl's __init__ wants a trainer config
        self.loop.server_manager, self.loop.tokenizer = Server(model, tok), tok
        self.loop.rollout_config = SimpleNamespace(response_length=response_length)
        self.tok, self.R, self.calls = tok, response_length, []

    def __call__(self, batch):
        from verl import DataProto

        outs = []
        for i in range(len(batch)):
            kw = {k: v[i] for k, v in batch.non_tensor_batch.items() if k != "agent_name"}
            outs.append(aio.run(self.loop.run({"temperature": 1.0, "top_p": 1.0}, **kw)))
        self.calls.append(batch)
        P = max(len(o.prompt_ids) for o in outs)
        pad = self.tok.pad_token_id
        prompts, resp = torch.full((len(outs), P), pad), torch.full((len(outs), self.R), pad)
        mask, att = torch.zeros((len(outs), self.R), dtype=torch.long), torch.zeros((len(outs), P + self.R),
                                                                                   dtype=torch.long)
        for i, o in enumerate(outs):
            prompts[i, P - len(o.prompt_ids):] = torch.tensor(o.prompt_ids)
            att[i, P - len(o.prompt_ids):P] = 1
            resp[i, :len(o.response_ids)] = torch.tensor(o.response_ids, dtype=torch.long)
            mask[i, :len(o.response_ids)] = torch.tensor(o.response_mask)
            att[i, P:P + len(o.response_ids)] = 1
        episode = np.empty(len(outs), dtype=object)
        episode[:] = [o.extra_fields["episode"] for o in outs]
        return DataProto.from_dict(tensors={"prompts": prompts, "responses": resp, "response_mask": mask,
                                            "attention_mask": att, "input_ids": torch.cat([prompts, resp], 1),
                                            "position_ids": (att.cumsum(-1) - 1).clamp(min=0)},
                                   non_tensors={"episode": episode})


def test_requests_one_row_per_episode_with_distinct_seeds():
    from components.trainer.verl.episodes import AGENT_LOOP_NAME, episode_requests

    starts = [Start(7, (), "7", 3), Start(9, ("up",), "9@1", 2)]
    b = episode_requests(starts, ENV, SamplingParams(1.0, 0.9, 8, 11), layout="turns", template="raw",
                         max_prompt_length=99)
    nt = b.non_tensor_batch
    assert len(b) == 5 and list(nt["map_seed"]) == [7, 7, 7, 9, 9] and list(nt["row"]) == [0, 1, 2, 3, 4]
    assert [list(p) for p in nt["prefix"]] == [[], [], [], ["up"], ["up"]]
    assert set(nt["agent_name"]) == {AGENT_LOOP_NAME} and all(list(r) == [] for r in nt["raw_prompt"])
    seeds = [s["seed"] for s in nt["sampling"]]
    assert len(set(seeds)) == 5 and all(s["max_tokens"] == 8 and s["top_p"] == 0.9 for s in nt["sampling"])
    again = episode_requests(starts, ENV, SamplingParams(1.0, 0.9, 8, 11), layout="turns", template="raw",
                             max_prompt_length=99)
    assert [s["seed"] for s in again.non_tensor_batch["sampling"]] == seeds


def test_turns_layout_rows_are_the_environments_prompts_and_replies(policy):
    from components.agentic.task import turn_rows
    from components.trainer.train_config import TrainConfig
    from components.trainer.verl.episodes import episode_requests, runs_from_output, turn_training_rows

    model, tok = policy
    gen = EpisodeGenerateSequences(model, tok, response_length=6)
    starts = [Start(3, (), "3", 2), Start(5, ("left", "up"), "5@2", 2)]
    batch = episode_requests(starts, ENV, SamplingParams(1.0, 1.0, 6, 0), layout="turns", template="raw",
                             max_prompt_length=512)
    runs = runs_from_output(gen(batch), starts)
    encode = prompt_encoder(tok, "raw")
    for r in runs:
        env, _ = replay(make, r.start.seed, r.start.prefix)
        assert r.turns[0].context_ids == encode(env.prompt())     # a replayed prefix is context
        for t in r.turns:                                         # every turn: the environment's prompt
            assert t.context_ids == encode(env.prompt()) and t.anchor == env.anchor()
            _, rew, _, _ = env.step(t.text)
            assert rew == t.reward
        assert r.length == len(r.start.prefix) + len(r.turns) and r.done
    cfg = TrainConfig(task="agentic", method="grpo", method_config={"n": 2})
    groups = turn_rows(runs, cfg)
    data = turn_training_rows(groups, tok.pad_token_id, 6)
    assert len(data) == sum(len(r.turns) for r in runs)
    adv, mask = data.batch["advantages"], data.batch["response_mask"]
    assert torch.equal(adv != 0, (mask == 1) & (adv != 0)) and (adv != 0).any()
    ctx = [tuple(p[a.bool()].tolist()) for p, a in zip(data.batch["prompts"],
                                                       data.batch["attention_mask"][:, :data.batch["prompts"].shape[1]])]
    assert ctx == [t.context_ids for r in runs for t in r.turns]
    assert adv[:, 0].tolist() == pytest.approx([g.meta["advantages"][0] for g in groups])
    with pytest.raises(ValueError, match="above max_prompt_length 10"):
        gen(episode_requests(starts[:1], ENV, SamplingParams(1.0, 1.0, 6, 0), layout="turns", template="raw",
                             max_prompt_length=10))


def test_serialized_layout_puts_advantage_on_replies_only(policy):
    from components.trainer.verl.episodes import episode_requests, runs_from_output, serialized_training_rows

    model, tok = policy
    gen = EpisodeGenerateSequences(model, tok, response_length=900)
    starts = [Start(3, (), "3", 2)]
    out = gen(episode_requests(starts, ENV, SamplingParams(1.0, 1.0, 6, 0), layout="serialized", template="raw",
                               max_prompt_length=512))
    runs = runs_from_output(out, starts)
    assert [len(r.turns) for r in runs] == [4, 4] and all(r.done for r in runs)   # max_steps, none cut
    turn_adv = [[1.0, -2.0, 0.5, 3.0], [0.25, 0.25, -1.0, 1.0]]
    data = serialized_training_rows(out, runs, turn_adv)
    adv, mask = data.batch["advantages"], out.batch["response_mask"]
    assert ((adv != 0) <= (mask == 1)).all() and (mask == 0).any()
    for i, ep in enumerate(out.non_tensor_batch["episode"]):
        for (a, b), x in zip(ep["spans"], turn_adv[i]):
            assert adv[i, a:b].tolist() == [x] * (b - a)
    out.batch["response_mask"][0, ep["spans"][0][0]] = 0      # a reply token marked as observation
    with pytest.raises(RuntimeError, match="masked"):
        serialized_training_rows(out, runs, turn_adv)


def _trainer(policy, tmp_path, method, method_config, steps, events):
    """EpisodePPOTrainer with the parts that need Ray workers replaced (actor update, verl's files)."""
    from omegaconf import OmegaConf
    from verl import DataProto

    from components.trainer.train_config import TrainConfig
    from components.trainer.verl.trainer import EpisodePPOTrainer
    from components.methods.registry import build

    model, tok = policy

    class Trainer(EpisodePPOTrainer):
        def _get_dp_size(self, wg, role):
            return 1

        def _balance_batch(self, data, metrics):
            pass

        def _compute_old_log_prob(self, data):
            n, R = data.batch["responses"].shape
            return DataProto.from_dict(tensors={"old_log_probs": torch.zeros(n, R), "entropys": torch.zeros(n, R)}), {}

        def _update_actor(self, data):
            events.append(("update", self.global_steps, data))
            return DataProto.from_single_dict(data={}, meta_info={"metrics": {"actor/pg_loss": [0.5],
                                                                              "actor/grad_norm": [1.0]}})

        def _save_checkpoint(self):
            (Path(self.config.trainer.default_local_dir) / "latest").write_text(str(self.global_steps))

        def _load_checkpoint(self):
            f = Path(self.config.trainer.default_local_dir) / "latest"
            self.global_steps = int(f.read_text()) if f.exists() else 0

    class Replicas:
        def sleep_replicas(self):
            events.append(("sleep",))

        def update_weights(self, step):
            events.append(("weights", step))

    t = Trainer.__new__(Trainer)
    t.cfg = TrainConfig(task="agentic", method=method, method_config=method_config, steps=steps, batch_prompts=2,
                        max_new_tokens=6, ckpt_every=1, val_every=2, val_size=2, micro_batch=8, seed=1)
    t.config = OmegaConf.create({
        "trainer": {"default_local_dir": str(tmp_path / "ckpt"), "project_name": "t", "experiment_name": "t",
                    "logger": ["console"], "balance_batch": False},
        "actor_rollout_ref": {"rollout": {"temperature": 1.0, "agent": {"num_workers": 2}}}})
    t.env_spec, t.layout, t.max_prompt_length, t.response_length = ENV, "turns", 512, 6
    t.tokenizer, t.meter, t.history, t.global_steps = tok, TokenMeter(backend="verl"), [], 0
    t.method = build(method, method_config, task="agentic")
    t.async_rollout_manager = SimpleNamespace(generate_sequences=EpisodeGenerateSequences(model, tok, 6))
    t.checkpoint_manager, t.actor_rollout_wg, t.use_reference_policy = Replicas(), None, False
    return t


def _expert(seed):
    from components.agentic.bc import expert_action

    env, acts, done = make(), [], False
    env.reset(seed)
    while not done and (a := expert_action(env)) is not None:
        acts.append(a)
        _, _, done, _ = env.step(a)
    return acts


def test_trainer_loop_gigpo_vsr_replay_and_resume(policy, tmp_path):
    from verl import DataProto

    from components.trainer.verl.trainer import STATE_FILE

    events: list[tuple] = []
    seeds = [s for s in range(40) if len(_expert(s)) > 1][:4]
    vsr = {"n": 2, "rho": 0.5, "expert_seed": True}
    resources = {"expert_traces": {str(s): _expert(s) for s in seeds}, "p0": {}}
    first = _trainer(policy, tmp_path, "vsr", vsr, 2, events)
    first.use_reference_policy = True       # verl's KL loss on (vsr_agentic.yaml): reference log-probs join the batch
    first._compute_ref_log_prob = lambda d: DataProto.from_dict(
        tensors={"ref_log_prob": torch.zeros(d.batch["responses"].shape)})
    first.fit_loop(seeds, [100, 101], resources)
    kinds = [e[0] for e in events]
    assert kinds[:1] == ["weights"] and kinds[1:5] == ["sleep", "update", "weights", "sleep"]
    assert kinds[5:7] == ["update", "weights"]
    rows = [h for h in first.history if "reward/mean" in h]
    assert [r["step"] for r in rows] == [1, 2] and all(r["groups/replay_frac"] == 0.5 for r in rows)
    assert {"val/accuracy", "tokens/generated", "train/adv_nonzero_frac", "train/actor/pg_loss",
            "response_length/clip_ratio", "method/buffer_trajectories"} <= {k for h in first.history for k in h}
    # the update saw one row per generated turn, every prompt a real environment prompt
    upd = [e[2] for e in events if e[0] == "update"]
    assert all("ref_log_prob" in d.batch.keys() and "old_log_probs" in d.batch.keys() for d in upd)
    turns = [int(r["rollouts"] * r["episode/new_turns_mean"] + 0.5) for r in rows]
    assert [int(d.batch["response_mask"].sum(-1).gt(0).sum()) for d in upd] == turns
    P = upd[0].batch["prompts"].shape[1]
    text = first.tokenizer.decode(upd[0].batch["prompts"][0][upd[0].batch["attention_mask"][0, :P].bool()].tolist())
    assert text.startswith("sokoban\n") and text.endswith(">")
    per_turn = {r["turn"] for r in first.meter.to_rows() if r.get("purpose") == "train_rollout"}
    assert per_turn >= {0, 1}                                        # tokens metered per turn
    state = json.loads((tmp_path / "ckpt" / "global_step_2" / STATE_FILE).read_text())
    assert state["step"] == 2 and state["method"]["step"] == 1
    events.clear()
    resumed = _trainer(policy, tmp_path, "vsr", vsr, 3, events)
    resumed.fit_loop(seeds, [100, 101], resources)
    assert events[0] == ("weights", 2) and [e[1] for e in events if e[0] == "update"] == [3]
    assert resumed.history[:len(first.history)] == first.history
    assert resumed.summary()["backend"] == "verl" and resumed.summary()["steps"] == 3


def test_stage_config_composes_for_both_layouts(tmp_path):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from components.stages.train import Params
    from components.trainer.verl.hydra_config import AGENT_LOOPS_YAML
    from components.trainer.verl.run import build_episode_config as build_config

    embedded = Params(task="agentic")
    assert "layout" not in embedded.model_dump() and "n_gpus_per_node" not in embedded.model_dump()
    for layout, R in (("turns", 8), ("serialized", 300)):
        p = Params(task="agentic", backend="verl", layout=layout, max_episode_tokens=300, method="vsr",
                   method_config={"n": 4, "rho": 0.5}, batch_prompts=2, micro_batch=4, max_prompt_length=160)
        cfg, config = build_config(p, tmp_path, tmp_path / "work", "s")
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
        ro = config.actor_rollout_ref.rollout
        assert ro.agent.default_agent_loop == "rlvr_episode" and ro.agent.agent_loop_config_path == str(AGENT_LOOPS_YAML)
        assert ro.response_length == R and ro.prompt_length == 160 and ro.n == 4
        assert config.actor_rollout_ref.actor.ppo_epochs == 1 and cfg.method == "vsr"
        assert config.trainer.default_local_dir == str((tmp_path / "work" / "verl_checkpoints").resolve())
    import yaml
    from hydra.utils import get_class

    for entry in yaml.safe_load(AGENT_LOOPS_YAML.read_text()):
        assert get_class(entry["_target_"]).__name__.endswith("AgentLoop")
