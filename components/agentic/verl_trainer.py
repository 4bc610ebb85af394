"""The agentic ``train`` stage on verl (``task: agentic``, ``backend: verl``).

The same update as the embedded trainer on episodes (``components.agentic.task``), with verl's
parts: the episodic method picks start states (map seeds, VSR's replayed turn prefixes); verl's
agent-loop workers play the episodes (``verl_loop.EpisodeAgentLoop``: the environment steps in
the worker, each turn a request to the vLLM servers); GiGPO gives every generated turn its
advantage on the driver; verl computes old log-probs and updates the FSDP actor; the new
weights go to the vLLM replicas. Observation tokens are never in the loss: in the ``turns``
layout they are each row's prompt, in ``serialized`` their ``response_mask`` is 0
(``verl_episodes``).

The loop is the one fit loop (``components.trainer.loop.FitLoop``) with the episode hooks of
``components.agentic.task.EpisodeLoop``, as the embedded episodic trainer runs it; this
class supplies the verl parts. verl plumbing shared with the math verl trainer is borrowed
from it function by function (``RLVRPPOTrainer``: the actor update call, checkpoints with the
loop state beside verl's, the HF export), so both backends checkpoint, resume and write their
outputs the same way. Ray is started as ``components.trainer.verl.run`` starts it (CPU platform
on a machine without a GPU).
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np
import torch
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from components.agentic.rollout import EpisodeGroup, EpisodeRun, Start, episode_runs, to_gigpo_episodes
from components.agentic.task import EpisodeLoop, turn_rows
from components.agentic.verl_episodes import (AGENT_LOOP_NAME, episode_requests, runs_from_output,
                                              serialized_training_rows,
                                              turn_training_rows)
from components.algos.advantages import adv_estimator
from components.engine.base import SamplingParams, TokenMeter
from components.methods.registry import build
from components.trainer.train_config import TrainConfig
from components.trainer.verl.trainer import RLVRPPOTrainer, _collate, _Indices, update_actor_on_rows

AGENT_LOOPS_YAML = Path(__file__).with_name("verl_agent_loops.yaml")


class EpisodePPOTrainer(EpisodeLoop, RayPPOTrainer):
    """The loop is ``FitLoop`` with ``EpisodeLoop``'s episode hooks, as the embedded episodic
    trainer runs it; this class supplies verl's rollout (``play``), update, replicas' sleep and
    weight sync around them, checkpoints and logger."""
    backend_name = "verl"
    # the math verl trainer's plumbing, unchanged (see the module docstring)
    _update_actor = RLVRPPOTrainer._update_actor
    _step_dir = RLVRPPOTrainer._step_dir
    restore = RLVRPPOTrainer.restore
    save_checkpoint = RLVRPPOTrainer.save_checkpoint
    save_outputs = RLVRPPOTrainer.save_outputs

    def __init__(self, config, tokenizer, role_worker_mapping, resource_pool_manager, ray_worker_group_cls, *,
                 train_cfg: TrainConfig, env_spec: dict, layout: str, max_prompt_length: int, n_train: int):
        ds = _Indices(max(n_train, train_cfg.batch_prompts))
        super().__init__(config=config, tokenizer=tokenizer, role_worker_mapping=role_worker_mapping,
                         resource_pool_manager=resource_pool_manager, ray_worker_group_cls=ray_worker_group_cls,
                         train_dataset=ds, val_dataset=_Indices(1), collate_fn=_collate,
                         train_sampler=torch.utils.data.SequentialSampler(ds))
        self.cfg, self.env_spec, self.layout = train_cfg, env_spec, layout
        self.max_prompt_length = max_prompt_length
        self.response_length = int(config.actor_rollout_ref.rollout.response_length)
        self.meter = TokenMeter(method=train_cfg.method, seed=train_cfg.seed, backend="verl")
        self.method = build(train_cfg.method, train_cfg.method_config, task="agentic")
        self.history: list[dict[str, float]] = []
        self.train_out = None      # the last training rollout's DataProto (the serialized layout's rows)

    # ------------------------------------------------------------------ loop hooks
    def begin_step(self, step: int) -> None:
        self.global_steps = step + 1          # verl's step counter: request meta_info, checkpoint dirs

    def after_rollout(self) -> None:
        self.checkpoint_manager.sleep_replicas()

    def after_update(self) -> None:
        self.checkpoint_manager.update_weights(self.global_steps)

    def log_metrics(self, row: dict[str, float], step: int) -> None:
        self.logger.log(data=row, step=step)

    # ------------------------------------------------------------------ rollouts
    def play(self, starts: Sequence[Start], seed: int, purpose: str = "train_rollout") -> list[EpisodeRun]:
        c = self.cfg
        batch = episode_requests(starts, self.env_spec, SamplingParams(c.temperature, c.top_p, c.max_new_tokens, seed),
                                 layout=self.layout, template=c.prompt_template,
                                 max_prompt_length=self.max_prompt_length)
        batch.meta_info.update({"eos_token_id": self.tokenizer.eos_token_id, "pad_token_id": self.tokenizer.pad_token_id,
                                "validate": purpose == "validation", "global_steps": self.global_steps})
        divisor = int(self.config.actor_rollout_ref.rollout.agent.num_workers)
        padded, pad_rows = pad_dataproto_to_divisor(batch, divisor)
        out = self.async_rollout_manager.generate_sequences(padded)
        kept = unpad_dataproto(out, pad_rows)
        runs = runs_from_output(kept, starts)
        self._meter(runs, kept, purpose)
        if pad_rows:   # generated to fill the divisor, then dropped: counted, never lost
            dropped = out.non_tensor_batch["episode"][len(kept):]
            if self.layout == "turns":
                gen = sum(len(t["response_ids"]) for ep in dropped for t in ep["turns"])
            else:
                gen = int(out.batch["response_mask"][len(kept):].sum())
            self.meter.record("discarded", prompt_tokens=0, generated_tokens=int(gen), sequences=pad_rows, requests=0)
        if purpose == "train_rollout":
            self.train_out = kept
        return runs

    def _meter(self, runs: Sequence[EpisodeRun], out, purpose: str) -> None:
        """Per turn index: the prompt tokens each turn's request carried and the reply tokens."""
        prompt_len = out.batch["attention_mask"][:, :out.batch["prompts"].shape[1]].sum(-1).tolist()
        per_turn: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
        for i, r in enumerate(runs):
            spans = out.non_tensor_batch["episode"][i].get("spans") or []
            for t, turn in enumerate(r.turns):
                ctx = len(turn.context_ids) if self.layout == "turns" else int(prompt_len[i]) + int(spans[t][0])
                acc = per_turn[t]
                acc[0] += ctx
                acc[1] += len(turn.response_ids)
                acc[2] += 1
        for t in sorted(per_turn):
            p, g, n = per_turn[t]
            with self.meter.tagged(turn=t):
                self.meter.record(purpose, prompt_tokens=p, generated_tokens=g, sequences=n, requests=n)

    # ------------------------------------------------------------------ the update
    def update(self, groups: Sequence[EpisodeGroup]) -> dict[str, float]:
        c, out, runs = self.cfg, self.train_out, episode_runs(groups)
        if self.layout == "turns":
            data = turn_training_rows(turn_rows(runs, c), self.tokenizer.pad_token_id, self.response_length)
        else:
            data = serialized_training_rows(out, runs, adv_estimator(c.adv_estimator)(to_gigpo_episodes(runs), c))
        nonzero = (data.batch["advantages"] != 0).any(-1)
        stats = {"rows": float(len(data)), "trained_rows": float(nonzero.sum()),
                 "adv_nonzero_frac": float(nonzero.float().mean()),
                 "adv_abs_mean": float(data.batch["advantages"].abs().sum() / data.batch["response_mask"].sum())}
        if not bool(nonzero.any()):      # a zero advantage contributes exactly nothing (as embedded)
            return stats
        return update_actor_on_rows(self, data, c.micro_batch, stats)

    # ------------------------------------------------------------------ the loop
    def fit_episodes(self, train_seeds: Sequence[int], val_seeds: Sequence[int], resources: dict[str, Any]) -> dict:
        from omegaconf import OmegaConf
        from verl.utils.tracking import Tracking

        self.logger = Tracking(project_name=self.config.trainer.project_name,
                               experiment_name=self.config.trainer.experiment_name,
                               default_backend=self.config.trainer.logger,
                               config=OmegaConf.to_container(self.config, resolve=True))
        return self.run_loop(train_seeds, val_seeds, resources, self.tokenizer)

    def step_metrics(self, groups: list[EpisodeGroup], before: dict, after: dict) -> dict[str, float]:
        """The episode metrics, plus the share of turns cut at the per-turn budget."""
        turns = [t for r in episode_runs(groups) for t in r.turns]
        clip = float(np.mean([t.finish_reason == "length" for t in turns])) if turns else math.nan
        return {**super().step_metrics(groups, before, after), "response_length/clip_ratio": clip}

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "layout": self.layout}


# ---------------------------------------------------------------------- one run (the stage's backend)
def verl_fields(c: TrainConfig, response_length: int) -> SimpleNamespace:
    """What ``components.trainer.verl.hydra_config.overrides`` reads from a train config, for an
    episodic run: one optimizer step per update (``ppo_epochs`` 1, the whole batch one
    mini-batch), so the PPO ratio is 1 and clipping never binds, as in the embedded trainer.
    ``adv_estimator`` only satisfies verl's config: this trainer computes GiGPO itself."""
    return SimpleNamespace(
        adv_estimator="grpo", batch_prompts=c.batch_prompts, max_new_tokens=response_length, seed=c.seed,
        micro_batch=c.micro_batch, ppo_epochs=1, lr=c.lr, weight_decay=0.0, warmup_steps=0, grad_clip=c.grad_clip,
        loss_agg_mode=c.loss_agg_mode, clip_low=0.2, clip_high=0.2, kl_coef=0.0, temperature=c.temperature,
        top_p=c.top_p, steps=c.steps, ckpt_every=c.ckpt_every, val_every=c.val_every, val_size=c.val_size)


def build_config(params, model_dir: Path, work_dir: Path, sweep: str):
    from components.trainer.verl.hydra_config import stage_config

    cfg = TrainConfig(**params.model_dump(include=set(TrainConfig.model_fields)))
    response_length = cfg.max_new_tokens if params.layout == "turns" else params.max_episode_tokens
    agentic = (f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_LOOP_NAME}",
               f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOPS_YAML}")
    n = build(cfg.method, cfg.method_config, task="agentic").rollouts_per_step(1)   # episodes per start state
    return cfg, stage_config(verl_fields(cfg, response_length), params, model_dir=model_dir, work_dir=work_dir, n=n,
                             sweep=sweep, experiment=f"train-agentic-{cfg.method}-s{cfg.seed}", extra=agentic)


def train_agentic_with_verl(params, ctx) -> dict:
    """The agentic train stage on verl: Ray (CPU platform where there is no GPU, as the math
    verl run), verl's workers, :class:`EpisodePPOTrainer`, the stage outputs."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from components.agentic.stages.common import env_factory, read_env
    from components.stages.common import read_json
    from components.trainer.verl.run import (attach_mlflow, cpu_platform_env, end_mlflow_run, model_path,
                                             ray_session, verl_workers)

    on_cpu = cpu_platform_env()
    spec = read_env(ctx.input("hard"))
    env_factory(spec)                                  # a bad spec fails here, before Ray starts
    kept = read_json(ctx.input("hard") / "train.json")
    heldout = [r["seed"] for r in read_json(ctx.input("hard") / "heldout.json")]
    traces = read_json(ctx.input("prefixes") / "traces.json")
    cfg, config = build_config(params, model_path(ctx.input("model")), ctx.work_dir, ctx.sweep)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    attach_mlflow(ctx.tracker.run_id)
    with ray_session(params, config, on_cpu):
        trainer = EpisodePPOTrainer(config, **verl_workers(config), train_cfg=cfg, env_spec=spec, layout=params.layout,
                                    max_prompt_length=params.max_prompt_length, n_train=len(kept))
        trainer.init_workers()
        status = "FAILED"
        try:
            summary = trainer.fit_episodes(
                [r["seed"] for r in kept], heldout,
                {"p0": {r["seed"]: r["base_pass_rate"] for r in kept if r["base_pass_rate"] is not None},
                 "expert_traces": traces})
            status = "FINISHED"
        finally:
            end_mlflow_run(status)
        trainer.save_outputs(ctx.out_dir)
        return summary
