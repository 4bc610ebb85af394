"""The verl backend: a ``RayPPOTrainer`` that runs the shared loop
(``components/trainer/loop.py``) with verl's rollout engine and actor update.

What this backend supplies to the loop: the rollout engine (``VerlRolloutEngine``: vLLM
servers behind verl's agent-loop manager; the replicas sleep after the rollout and get the
new weights after the update); the update in verl's order (``RayPPOTrainer.fit``): the
groups become a DataProto (``dataproto.groups_to_dataproto``: uid per group, replayed prefix
on the prompt side); verl's ``core_algos`` computes uid-grouped advantages (the method's own
advantage terms applied on top); the batch is padded to the data-parallel size with
loss-free rows and balanced; verl computes old (and reference) log-probs and updates the
actor; verl's checkpoints (with the loop's state beside them); metrics to the stage's MLflow
run through verl's own logger (``MLFLOW_RUN_ID``). The stage outputs are the embedded
trainer's: ``model/``, ``metrics.jsonl``, ``tokens.json``, ``method_state.json``,
``summary.json``.

Needs Ray workers with GPUs and vLLM (the trainer image); on a CPU machine this module
imports, and ``dataproto``/``rollout``/``config`` are tested without workers.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from verl.protocol import pad_dataproto_to_divisor
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import tensordict_utils as tu
from verl.utils.py_functional import rename_dict
from verl.workers.utils.padding import left_right_2_no_padding

from components.data.prompting import encode_prompt
from components.data.schema import Problem
from components.engine.base import SamplingParams, TokenMeter
from components.methods.base import Group, RolloutContext
from components.methods.registry import build
from components.trainer.loop import FitLoop
from components.trainer.train_config import TrainConfig
from components.trainer.verl.dataproto import apply_method_advantages, groups_to_dataproto, verl_advantages
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


class RLVRPPOTrainer(FitLoop, RayPPOTrainer):
    backend_name = "verl"

    def __init__(self, config, tokenizer, role_worker_mapping, resource_pool_manager, ray_worker_group_cls, *,
                 train_cfg: TrainConfig, n_train: int, n_val: int):
        ds = _Indices(max(n_train, train_cfg.batch_prompts))
        super().__init__(config=config, tokenizer=tokenizer, role_worker_mapping=role_worker_mapping,
                         resource_pool_manager=resource_pool_manager, ray_worker_group_cls=ray_worker_group_cls,
                         train_dataset=ds, val_dataset=_Indices(max(n_val, 1)), collate_fn=_collate,
                         train_sampler=torch.utils.data.SequentialSampler(ds))
        self.cfg = train_cfg
        self.meter = TokenMeter(method=train_cfg.method, seed=train_cfg.seed, backend="verl")
        self.method = build(train_cfg.method, train_cfg.method_config)
        self.history: list[dict[str, float]] = []
        from components.trainer.verl.advantages import TOKEN_ADVANTAGES

        self.token_advantages = TOKEN_ADVANTAGES.get(train_cfg.method) if self.method.per_token_advantages else None
        if self.method.per_token_advantages and self.token_advantages is None:
            raise ValueError(f"method {train_cfg.method}: entropy-shaped token advantages (RL-ZVP) are "
                             "embedded-trainer only; use backend: embedded")

    # ------------------------------------------------------------------ loop hooks
    def engine(self) -> VerlRolloutEngine:
        return VerlRolloutEngine(self.async_rollout_manager.generate_sequences, self.tokenizer, meter=self.meter,
                                 divisor=int(self.config.actor_rollout_ref.rollout.agent.num_workers),
                                 meta_info={"global_steps": self.global_steps})

    def rollout_ctx(self, step: int, seed_base: int) -> RolloutContext:
        c = self.cfg
        return RolloutContext(engine=self.engine(), grade=self.grade,
                              encode_prompt=lambda p: encode_prompt(p, self.tokenizer, c.prompt_template),
                              sampling=SamplingParams(c.temperature, c.top_p, c.max_new_tokens, seed_base), step=step)

    def begin_step(self, step: int) -> None:
        self.global_steps = step + 1          # verl's step counter: engine meta_info, checkpoint dirs

    def after_rollout(self) -> None:
        self.checkpoint_manager.sleep_replicas()

    def after_update(self) -> None:
        self.checkpoint_manager.update_weights(self.global_steps)

    def log_metrics(self, row: dict[str, float], step: int) -> None:
        self.logger.log(data=row, step=step)

    def _update_actor(self, batch):
        """verl's update with the step's real batch size as the (single) mini-batch: methods
        with variable group sizes (VSR, DAPO, PODS) keep one optimizer step per training step."""
        batch.meta_info["multi_turn"] = False
        batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        # the loss is a mean over the rows that carry loss: pad rows (update's divisor padding)
        # must not dilute it, so global_batch_size counts rows with a response token
        real_rows = max(1, int((batch.batch["response_mask"].sum(-1) > 0).sum()))
        td = left_right_2_no_padding(batch.to_tensordict())
        actor = self.config.actor_rollout_ref.actor
        tu.assign_non_tensor(td, calculate_entropy=bool(actor.calculate_entropy), distillation_use_topk=False,
                             distillation_only=False, global_batch_size=real_rows, mini_batch_size=len(batch),
                             epochs=actor.ppo_epochs, seed=actor.data_loader_seed,
                             dataloader_kwargs={"shuffle": actor.shuffle}, compute_loss=True)
        out = rename_dict(tu.get(self.actor_rollout_wg.update_actor(td), "metrics"), "actor/")
        from verl import DataProto
        return DataProto.from_single_dict(data={}, meta_info={"metrics": out})

    def update(self, groups: list[Group]) -> dict[str, float]:
        if any(g.supervised for g in groups):
            raise ValueError(f"method {self.cfg.method}: supervised groups (SFT) are embedded-trainer only")
        data = groups_to_dataproto(groups, self.tokenizer.pad_token_id, response_length=self.cfg.max_new_tokens)
        data.batch["advantages"] = verl_advantages(data, self.cfg.adv_estimator)
        apply_method_advantages(data, self.method, groups)
        hook = None if self.token_advantages is None else lambda d, ent: self.token_advantages(self.method, d, ent)
        return update_actor_on_rows(self, data, self.cfg.micro_batch, {}, token_advantages=hook)

    # ------------------------------------------------------------------ checkpoints
    def _step_dir(self, step: int) -> Path:
        return Path(self.config.trainer.default_local_dir) / f"global_step_{step}"

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
    def fit_rlvr(self, problems: Sequence[Problem], val_problems: Sequence[Problem], resources: dict[str, Any],
                 grade) -> dict[str, Any]:
        from omegaconf import OmegaConf
        from verl.utils.tracking import Tracking

        self.grade = grade
        self.logger = Tracking(project_name=self.config.trainer.project_name,
                               experiment_name=self.config.trainer.experiment_name,
                               default_backend=self.config.trainer.logger,
                               config=OmegaConf.to_container(self.config, resolve=True))
        return self.run_loop(problems, val_problems, resources, self.tokenizer)

    def save_outputs(self, out_dir: Path) -> None:
        """The embedded trainer's outputs; the model is the last checkpoint's HF export."""
        out_dir.mkdir(parents=True, exist_ok=True)
        hf = self._step_dir(self.cfg.steps) / "actor" / "huggingface"
        if not (hf / "config.json").is_file():
            raise RuntimeError(f"{hf}: no HF export in the final verl checkpoint (save_contents needs hf_model)")
        shutil.copytree(hf, out_dir / "model", dirs_exist_ok=True)
        self.tokenizer.save_pretrained(out_dir / "model")
        self.write_records(out_dir)


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
    data, pad = pad_dataproto_to_divisor(data, dp * micro_batch)
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
    if token_advantages is not None:     # RL-ZVP: advantages from the old policy's entropy (advantages.py)
        metrics.update(token_advantages(data, entropys))
    data = data.union(old)
    if trainer.use_reference_policy:     # verl's KL loss (kl_coef > 0, or a sweep's verl_overrides)
        data = data.union(trainer._compute_ref_log_prob(data))
    out = trainer._update_actor(data)
    metrics.update({k: float(v) for k, v in reduce_metrics(out.meta_info["metrics"]).items()})
    return metrics
