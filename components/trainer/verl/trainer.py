"""The verl backend: a ``RayPPOTrainer`` whose generation step is our method.

One step, in verl's order (``RayPPOTrainer.fit``): the method picks the batch's rollouts
through ``VerlRolloutEngine`` (vLLM servers behind verl's agent-loop manager) and grades
them on the driver; the rollout replicas sleep; the groups become a DataProto
(``batch.groups_to_dataproto``: uid per group, replayed prefix on the prompt side); verl's
``core_algos`` computes uid-grouped advantages (the method's own advantage terms applied
on top); the batch is padded to the data-parallel size with loss-free rows and balanced;
verl computes old (and reference) log-probs and updates the actor; checkpoint; the new
weights go to the replicas; validation. Metrics go to the stage's MLflow run through
verl's own logger (``MLFLOW_RUN_ID``), and the stage outputs are the embedded trainer's:
``model/``, ``metrics.jsonl``, ``tokens.json``, ``method_state.json``, ``summary.json``.

Needs Ray workers with GPUs and vLLM (the trainer image); on a CPU machine this module
imports, and ``batch``/``rollout``/``config`` are tested without workers.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time
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
from components.trainer.config import TrainConfig
from components.trainer.embedded import EmbeddedTrainer, batch_order
from components.trainer.verl.batch import apply_method_advantages, groups_to_dataproto, verl_advantages
from components.trainer.verl.rollout import VerlRolloutEngine

STATE_FILE = "rlvr_state.json"


class _Indices(torch.utils.data.Dataset):
    """verl's trainer wants dataloaders; our batches come from ``batch_order`` (the embedded
    trainer's seeded epochs), so the dataset is only a count."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"index": np.int64(i)}


def _collate(items: list[dict]) -> dict:
    return {"index": np.array([it["index"] for it in items], dtype=np.int64)}


class RLVRPPOTrainer(RayPPOTrainer):
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
        if self.method.per_token_advantages:
            raise ValueError(f"method {train_cfg.method}: entropy-shaped token advantages (RL-ZVP) are "
                             "embedded-trainer only; use backend: embedded")

    # ------------------------------------------------------------------ pieces
    def engine(self) -> VerlRolloutEngine:
        return VerlRolloutEngine(self.async_rollout_manager.generate_sequences, self.tokenizer, meter=self.meter,
                                 divisor=int(self.config.actor_rollout_ref.rollout.agent.num_workers),
                                 meta_info={"global_steps": self.global_steps})

    def rollout_ctx(self, step: int, seed_base: int) -> RolloutContext:
        c = self.cfg
        return RolloutContext(engine=self.engine(), grade=self.grade,
                              encode_prompt=lambda p: encode_prompt(p, self.tokenizer, c.prompt_template),
                              sampling=SamplingParams(c.temperature, c.top_p, c.max_new_tokens, seed_base), step=step)

    def validate_accuracy(self, problems: Sequence[Problem], step: int) -> float:
        ctx = self.rollout_ctx(0, 7_919 + self.cfg.seed)   # the embedded trainer's validation seed
        with self.meter.tagged(step=step):
            groups = ctx.sample_groups(ctx.prompt_items(problems), self.cfg.val_samples, purpose="validation")
        return float(np.mean([r for g in groups for r in g.rewards]))

    def _update_actor(self, batch):
        """verl's update with the step's real batch size as the (single) mini-batch: methods
        with variable group sizes (VSR, DAPO, PODS) keep one optimizer step per training step."""
        batch.meta_info["multi_turn"] = False
        batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        td = left_right_2_no_padding(batch.to_tensordict())
        actor = self.config.actor_rollout_ref.actor
        tu.assign_non_tensor(td, calculate_entropy=bool(actor.calculate_entropy), distillation_use_topk=False,
                             distillation_only=False, global_batch_size=len(batch), mini_batch_size=len(batch),
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
        data.batch["returns"] = data.batch["advantages"].clone()
        data.non_tensor_batch["multi_modal_inputs"] = np.array([{}] * len(data), dtype=object)
        # pad to the data-parallel size with copies that carry no loss (fully masked rows are
        # excluded by every agg_loss mode), then balance tokens over ranks as verl does
        dp = self._get_dp_size(self.actor_rollout_wg, "actor")
        data, pad = pad_dataproto_to_divisor(data, dp)
        if pad:
            data.batch["response_mask"][-pad:] = 0
            data.batch["advantages"][-pad:] = 0
        metrics: dict[str, float] = {"train/pad_rows": float(pad)}
        if self.config.trainer.balance_batch:
            self._balance_batch(data, metrics=metrics)
        data.meta_info["global_token_num"] = torch.sum(data.batch["attention_mask"], dim=-1).tolist()
        data.meta_info["images_seqlens"] = []
        # what verl's fit sets after generation (ray_trainer.py:1329-1331): the log-prob and
        # update passes read the sampling temperature from here
        data.meta_info["multi_turn"] = False
        data.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        old, _ = self._compute_old_log_prob(data)
        old.batch.pop("entropys")
        data = data.union(old)
        if self.use_reference_policy:
            data = data.union(self._compute_ref_log_prob(data))
        out = self._update_actor(data)
        from verl.utils.metric import reduce_metrics
        metrics.update({f"train/{k}": float(v) for k, v in reduce_metrics(out.meta_info["metrics"]).items()})
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def _step_dir(self, step: int) -> Path:
        return Path(self.config.trainer.default_local_dir) / f"global_step_{step}"

    def _save_checkpoint(self):
        # our state first, verl's tracker file (written last by super) makes the step visible
        d = self._step_dir(self.global_steps)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps({"step": self.global_steps, "method": self.method.state_dict(),
                                   "meter": self.meter.state_dict(), "history": self.history}))
        os.replace(tmp, d / STATE_FILE)
        super()._save_checkpoint()

    # ------------------------------------------------------------------ the loop
    def fit_rlvr(self, problems: Sequence[Problem], val_problems: Sequence[Problem], resources: dict[str, Any],
                 grade) -> dict[str, Any]:
        from omegaconf import OmegaConf
        from verl.utils.tracking import Tracking

        c, self.grade = self.cfg, grade
        self.logger = Tracking(project_name=self.config.trainer.project_name,
                               experiment_name=self.config.trainer.experiment_name,
                               default_backend=self.config.trainer.logger,
                               config=OmegaConf.to_container(self.config, resolve=True))
        self.method.setup(problems, {**resources, "tokenizer": self.tokenizer})
        train_set = self.method.training_problems(problems)
        if not train_set:
            raise ValueError(f"{c.method}: no training problems")
        val_set = list(val_problems)[: c.val_size]
        self.global_steps = 0
        self._load_checkpoint()                       # verl: actor weights, optimizer, dataloader
        if self.global_steps > 0:
            state = json.loads((self._step_dir(self.global_steps) / STATE_FILE).read_text())
            self.method.load_state_dict(state["method"])
            self.meter.load_state_dict(state["meter"])
            self.history = state["history"]
            print(f"[train {c.method} verl] resumed at step {self.global_steps}", flush=True)
        self.checkpoint_manager.update_weights(self.global_steps)
        if self.global_steps == 0 and val_set:
            self._log({"val/accuracy": self.validate_accuracy(val_set, -1)}, step=0)
        for step in range(self.global_steps, c.steps):
            self.global_steps = step + 1
            t0 = time.monotonic()
            batch = [train_set[i] for i in batch_order(len(train_set), c.seed, step, c.batch_prompts)]
            before = self.meter.totals()
            with self.meter.tagged(step=step):
                groups = self.method.rollout(batch, self.rollout_ctx(step, c.seed), np.random.default_rng([c.seed, step, 17]))
            self.checkpoint_manager.sleep_replicas()
            t_gen = time.monotonic() - t0
            self.method.observe(groups)
            upd = self.update(groups)
            self.checkpoint_manager.update_weights(self.global_steps)
            row = EmbeddedTrainer._step_metrics(self, groups, before, self.meter.totals())  # same metric names
            row.update(upd)
            row.update({"time/step_s": time.monotonic() - t0, "time/generate_s": t_gen})
            row.update({f"method/{k}": v for k, v in self.method.step_stats().items()})
            if val_set and ((step + 1) % c.val_every == 0 or step + 1 == c.steps):
                row["val/accuracy"] = self.validate_accuracy(val_set, step)
            self._log(row, step=step + 1)
            # after the step's row is in the history: a resumed run keeps every step's metrics
            if (step + 1) % c.ckpt_every == 0 or step + 1 == c.steps:
                self._save_checkpoint()
        return self.summary()

    def _log(self, row: dict[str, float], step: int) -> None:
        clean = {k: float(v) for k, v in row.items() if v is not None and not math.isnan(float(v))}
        self.logger.log(data=clean, step=step)
        self.history.append({"step": step, **clean})

    def summary(self) -> dict[str, Any]:
        return {**EmbeddedTrainer.summary(self), "backend": "verl"}

    def save_outputs(self, out_dir: Path) -> None:
        """The embedded trainer's outputs; the model is the last checkpoint's HF export."""
        out_dir.mkdir(parents=True, exist_ok=True)
        hf = self._step_dir(self.cfg.steps) / "actor" / "huggingface"
        if not (hf / "config.json").is_file():
            raise RuntimeError(f"{hf}: no HF export in the final verl checkpoint (save_contents needs hf_model)")
        shutil.copytree(hf, out_dir / "model", dirs_exist_ok=True)
        self.tokenizer.save_pretrained(out_dir / "model")
        EmbeddedTrainer.write_records(self, out_dir)
