"""The verl trainer: a ``RayPPOTrainer`` that runs the one fit loop
(``components/trainer/loop.py``) with verl's rollout workers and actor update, on math prompts
and on multi-turn episodes alike. What differs by task is the agent loop that verl's rollout
workers run (``agent_loop.py``, registered in ``agent_loops.yaml``) and how the step's groups
become training rows; everything else is :class:`VerlTrainer`'s, written once:

* the loop's backend hooks: verl's step counter; the vLLM replicas sleep after the rollout and
  get the new weights after the update; metrics to the stage's MLflow run through verl's own
  logger (``MLFLOW_RUN_ID``);
* the update in verl's order (``RayPPOTrainer.fit``, :func:`update_actor_on_rows`): training
  rows padded to the data-parallel size with loss-free rows and balanced; verl computes old
  (and reference) log-probs and updates the actor with the step's real batch as one mini-batch;
* verl's checkpoints with the loop's state beside them, resume, and the stage outputs of the
  embedded trainer (``model/``, ``metrics.jsonl``, ``tokens.json``, ``method_state.json``,
  ``summary.json``).

:class:`RLVRPPOTrainer` (math): the method samples through ``VerlRolloutEngine``
(``rollout.py``: token-id requests for ``ContextIdsAgentLoop``); groups become a DataProto
(``dataproto.groups_to_dataproto``: uid per group, replayed prefix on the prompt side) with
verl ``core_algos``' uid-grouped advantages and the method's own terms on top.

:class:`EpisodePPOTrainer` (episodes): the method picks start states (map seeds, VSR's replayed
turn prefixes); ``EpisodeAgentLoop`` plays each episode in the rollout worker, the environment
stepping there and every turn a request to the vLLM servers; GiGPO gives every generated turn
its advantage on the driver (``episodes.py``: one row per turn, or one serialized row per
episode with observation tokens masked out of the loss).

Needs Ray workers (GPUs, or the CPU platform of ``cpu_platform.py``) and vLLM; without them
this module imports, and the hooks are tested with the worker calls replaced.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import tensordict_utils as tu
from verl.utils.py_functional import rename_dict
from verl.workers.utils.padding import left_right_2_no_padding

from components.agentic.rollout import EpisodeGroup, EpisodeRun, Start, episode_runs, to_gigpo_episodes
from components.agentic.task import EpisodeLoop, turn_rows
from components.algos.advantages import adv_estimator
from components.data.prompting import encode_prompt
from components.engine.base import SamplingParams, TokenMeter
from components.methods.base import Group, RolloutContext
from components.methods.registry import build
from components.trainer.loop import FitLoop
from components.trainer.train_config import TrainConfig
from components.trainer.verl.dataproto import apply_method_advantages, groups_to_dataproto, verl_advantages
from components.trainer.verl.episodes import (episode_requests, runs_from_output, serialized_training_rows,
                                              turn_training_rows)
from components.trainer.verl.rollout import VerlRolloutEngine

STATE_FILE = "rlvr_state.json"


class _Indices(torch.utils.data.Dataset):
    """verl's trainer wants dataloaders; our batches come from the loop's ``batch_order``
    (seeded epochs), so the dataset is only a count."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"index": np.int64(i)}


def _collate(items: list[dict]) -> dict:
    return {"index": np.array([it["index"] for it in items], dtype=np.int64)}


class VerlTrainer(RayPPOTrainer):
    """The backend half of the loop on verl, for every task. A task's trainer adds the loop's
    task hooks (``FitLoop``'s for math, ``EpisodeLoop``'s for episodes) after this class, and
    its rollout and ``update``."""
    backend_name = "verl"

    def __init__(self, config, tokenizer, role_worker_mapping, resource_pool_manager, ray_worker_group_cls, *,
                 train_cfg, task: str, n_train: int, n_val: int):
        self.cfg = train_cfg
        # verl's trainer wants dataloaders; our batches come from the loop's batch_order
        ds = _Indices(max(n_train, train_cfg.batch_prompts))
        super().__init__(config=config, tokenizer=tokenizer, role_worker_mapping=role_worker_mapping,
                         resource_pool_manager=resource_pool_manager, ray_worker_group_cls=ray_worker_group_cls,
                         train_dataset=ds, val_dataset=_Indices(max(n_val, 1)), collate_fn=_collate,
                         train_sampler=torch.utils.data.SequentialSampler(ds))
        self.meter = TokenMeter(method=train_cfg.method, seed=train_cfg.seed, backend="verl")
        self.method = build(train_cfg.method, train_cfg.method_config, task=task)
        self.history: list[dict[str, float]] = []

    # ------------------------------------------------------------------ loop hooks
    def begin_step(self, step: int) -> None:
        self.global_steps = step + 1          # verl's step counter: request meta_info, checkpoint dirs

    def after_rollout(self) -> None:
        self.checkpoint_manager.sleep_replicas()

    def after_update(self) -> None:
        self.checkpoint_manager.update_weights(self.global_steps)

    def log_metrics(self, row: dict[str, float], step: int) -> None:
        self.logger.log(data=row, step=step)

    def _update_actor(self, batch):
        """verl's update on the step's real rows, split into the config's number of mini-batches
        (``TrainConfig.mini_batches``; rows padded to a multiple by ``update_actor_on_rows``):
        methods with variable group sizes (VSR, DAPO, PODS) keep the optimizer steps per
        training step that fixed-size ones take."""
        batch.meta_info["multi_turn"] = False
        batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        # the loss is a mean over the rows that carry loss: pad rows (update's divisor padding)
        # must not dilute it, so global_batch_size counts rows with a response token
        # (per mini-batch: the mean, exact when every prompt has its n rows and no pad)
        k = self.cfg.mini_batches
        real_rows = max(1, round(int((batch.batch["response_mask"].sum(-1) > 0).sum()) / k))
        td = left_right_2_no_padding(batch.to_tensordict())
        actor = self.config.actor_rollout_ref.actor
        tu.assign_non_tensor(td, calculate_entropy=bool(actor.calculate_entropy), distillation_use_topk=False,
                             distillation_only=False, global_batch_size=real_rows, mini_batch_size=len(batch) // k,
                             epochs=actor.ppo_epochs, seed=actor.data_loader_seed,
                             dataloader_kwargs={"shuffle": actor.shuffle}, compute_loss=True)
        out = rename_dict(tu.get(self.actor_rollout_wg.update_actor(td), "metrics"), "actor/")
        from verl import DataProto
        return DataProto.from_single_dict(data={}, meta_info={"metrics": out})

    # ------------------------------------------------------------------ checkpoints
    def _step_dir(self, step: int) -> Path:
        return Path(self.config.trainer.default_local_dir) / f"global_step_{step}"

    def best_dir(self) -> Path:
        return Path(self.config.trainer.default_local_dir).parent / "best"

    def best_weights(self, dst: Path) -> None:
        shutil.copytree(self._step_dir(self.global_steps) / "actor" / "huggingface", dst, dirs_exist_ok=True)

    def restore(self) -> tuple[int, dict[str, Any] | None]:
        self.global_steps = 0
        self._load_checkpoint()                       # verl: actor weights, optimizer, dataloader
        state = None
        if self.global_steps > 0:
            state = json.loads((self._step_dir(self.global_steps) / STATE_FILE).read_text())
            print(f"[train {self.cfg.method} verl] resumed at step {self.global_steps}", flush=True)
        self.checkpoint_manager.update_weights(self.global_steps)
        return self.global_steps, state

    def save_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        # our state first, verl's tracker file (written last by verl) makes the step visible
        d = self._step_dir(self.global_steps)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps({"step": self.global_steps, **state}))
        os.replace(tmp, d / STATE_FILE)
        self._save_checkpoint()

    # ------------------------------------------------------------------ entry points
    def fit_loop(self, items: Sequence[Any], val_items: Sequence[Any], resources: dict[str, Any]) -> dict[str, Any]:
        """The loop over ``items`` (problems or map seeds), logging through verl's ``Tracking``."""
        from omegaconf import OmegaConf
        from verl.utils.tracking import Tracking

        self.logger = Tracking(project_name=self.config.trainer.project_name,
                               experiment_name=self.config.trainer.experiment_name,
                               default_backend=self.config.trainer.logger,
                               config=OmegaConf.to_container(self.config, resolve=True))
        return self.run_loop(items, val_items, resources, self.tokenizer)

    def save_outputs(self, out_dir: Path) -> None:
        """The embedded trainer's outputs; the model is the last checkpoint's HF export (or the
        kept one's, ``keep_best: val``)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        hf = self.output_model_dir() or self._step_dir(self.cfg.steps) / "actor" / "huggingface"
        if not (hf / "config.json").is_file():
            raise RuntimeError(f"{hf}: no HF export in the final verl checkpoint (save_contents needs hf_model)")
        shutil.copytree(hf, out_dir / "model", dirs_exist_ok=True, ignore=shutil.ignore_patterns("best.json"))
        self.tokenizer.save_pretrained(out_dir / "model")
        self.write_records(out_dir)


class RLVRPPOTrainer(VerlTrainer, FitLoop):
    """Math prompts on verl: the method's rollouts through ``VerlRolloutEngine``; ``grade``
    (texts, golds) -> (reward, verdict) pairs is set by the run before ``fit_loop``."""

    grade: Any

    def __init__(self, config, tokenizer, role_worker_mapping, resource_pool_manager, ray_worker_group_cls, *,
                 train_cfg: TrainConfig, n_train: int, n_val: int):
        super().__init__(config, tokenizer, role_worker_mapping, resource_pool_manager, ray_worker_group_cls,
                         train_cfg=train_cfg, task="math", n_train=n_train, n_val=n_val)
        from components.trainer.verl.advantages import TOKEN_ADVANTAGES

        self.token_advantages = TOKEN_ADVANTAGES.get(train_cfg.method) if self.method.per_token_advantages else None
        if self.method.per_token_advantages and self.token_advantages is None:
            raise ValueError(f"method {train_cfg.method}: its per-token advantages have no verl estimator "
                             "(components/trainer/verl/advantages.py); use backend: embedded")

    def engine(self) -> VerlRolloutEngine:
        return VerlRolloutEngine(self.async_rollout_manager.generate_sequences, self.tokenizer, meter=self.meter,
                                 divisor=int(self.config.actor_rollout_ref.rollout.agent.num_workers),
                                 meta_info={"global_steps": self.global_steps})

    def rollout_ctx(self, step: int, seed_base: int) -> RolloutContext:
        c = self.cfg
        return RolloutContext(engine=self.engine(), grade=self.grade,
                              encode_prompt=lambda p: encode_prompt(p, self.tokenizer, c.prompt_template),
                              sampling=SamplingParams(c.temperature, c.top_p, c.max_new_tokens, seed_base), step=step)

    def update(self, groups: list[Group]) -> dict[str, float]:
        if any(g.supervised for g in groups):
            raise ValueError(f"method {self.cfg.method}: supervised groups train through verl's SFT trainer "
                             "(components/trainer/verl/sft.py), not the PPO update")
        data = groups_to_dataproto(groups, self.tokenizer.pad_token_id, response_length=self.cfg.max_new_tokens)
        data.batch["advantages"] = verl_advantages(data, self.cfg.adv_estimator)
        apply_method_advantages(data, self.method, groups)
        hook = None
        if self.token_advantages is not None:
            self.method.token_advantage_groups(groups)      # the method's rows of this step (PG-OPD's teacher)
            data.non_tensor_batch["row"] = np.arange(len(data))

            def hook(d, ent, old):
                return self.token_advantages(self.method, d, ent, old)
        return update_actor_on_rows(self, data, self.cfg.micro_batch, {}, token_advantages=hook)


class EpisodePPOTrainer(VerlTrainer, EpisodeLoop):
    """Episodes on verl: ``EpisodeAgentLoop`` plays them in verl's rollout workers."""

    def __init__(self, config, tokenizer, role_worker_mapping, resource_pool_manager, ray_worker_group_cls, *,
                 train_cfg: TrainConfig, env_spec: dict, layout: str, max_prompt_length: int, n_train: int):
        super().__init__(config, tokenizer, role_worker_mapping, resource_pool_manager, ray_worker_group_cls,
                         train_cfg=train_cfg, task="agentic", n_train=n_train, n_val=1)
        self.env_spec, self.layout, self.max_prompt_length = env_spec, layout, max_prompt_length
        self.response_length = int(config.actor_rollout_ref.rollout.response_length)
        self.train_out = None      # the last training rollout's DataProto (the serialized layout's rows)

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

    def step_metrics(self, groups: list[EpisodeGroup], before: dict, after: dict) -> dict[str, float]:
        """The episode metrics, plus the share of turns cut at the per-turn budget."""
        turns = [t for r in episode_runs(groups) for t in r.turns]
        clip = float(np.mean([t.finish_reason == "length" for t in turns])) if turns else math.nan
        return {**super().step_metrics(groups, before, after), "response_length/clip_ratio": clip}

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "layout": self.layout}


def update_actor_on_rows(trainer: RayPPOTrainer, data, micro_batch: int, metrics: dict[str, float],
                         token_advantages=None) -> dict[str, float]:
    """verl's actor update on training rows that carry ``advantages`` (math groups or episode
    turns): loss-free pad rows, token balance over ranks, old (and reference) log-probs, one
    ``update_actor``; ``metrics`` gets ``pad_rows`` and verl's reduced update metrics."""
    from verl.utils.metric import reduce_metrics

    data.batch["returns"] = data.batch["advantages"].clone()
    data.non_tensor_batch["multi_modal_inputs"] = np.array([{}] * len(data), dtype=object)
    # pad to the data-parallel size with copies that carry no loss (fully masked rows are
    # excluded by every agg_loss mode): verl splits each rank's rows into micro-batches of exactly
    # micro_batch (engine/utils.py:125 asserts it), so 16 rows at micro_batch 64, or a
    # variable-size VSR/DAPO step, would crash
    dp = trainer._get_dp_size(trainer.actor_rollout_wg, "actor")
    data, pad = pad_dataproto_to_divisor(data, dp * micro_batch * trainer.cfg.mini_batches)
    if pad:
        data.batch["response_mask"][-pad:] = 0
        data.batch["advantages"][-pad:] = 0
    metrics["pad_rows"] = float(pad)
    if trainer.config.trainer.balance_batch:
        trainer._balance_batch(data, metrics=metrics)
    data.meta_info["global_token_num"] = torch.sum(data.batch["attention_mask"], dim=-1).tolist()
    data.meta_info["images_seqlens"] = []
    # what verl's fit sets after generation (ray_trainer.py:1329-1331): the log-prob and
    # update passes read the sampling temperature from here
    data.meta_info["multi_turn"] = False
    data.meta_info["temperature"] = trainer.config.actor_rollout_ref.rollout.temperature
    old, _ = trainer._compute_old_log_prob(data)
    entropys = old.batch.pop("entropys")
    if token_advantages is not None:     # RL-ZVP, OPD: from the old policy's entropy / log-probs (advantages.py)
        metrics.update(token_advantages(data, entropys, old.batch["old_log_probs"]))
    data = data.union(old)
    if trainer.use_reference_policy:     # verl's KL loss (kl_coef > 0, or a sweep's verl_overrides)
        data = data.union(trainer._compute_ref_log_prob(data))
    out = trainer._update_actor(data)
    metrics.update({k: float(v) for k, v in reduce_metrics(out.meta_info["metrics"]).items()})
    return metrics
