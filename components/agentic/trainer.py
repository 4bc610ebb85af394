"""The episodic trainer: the one fit loop (``components.trainer.loop.FitLoop``) on episodes.

The loop is the math trainer's (batches of seeded epochs, rollout, observe, update, metrics,
validation, checkpoint, resume); :class:`EpisodeLoop` supplies the episode-specific hooks and
:class:`EpisodeTrainer` the embedded backend's parts:

* the training items are map seeds; the method (``components.methods.registry``, the same
  methods as on math) picks start states (map seeds, replayed turn prefixes) for the step's
  batch of seeds through an :class:`~components.agentic.rollout.EpisodeContext`, whose
  ``play`` generates their episodes turn by turn
  (:func:`~components.agentic.rollout.rollout_episodes`);
* GiGPO (``components.algos.gigpo``) gives every generated turn an advantage
  (:func:`turn_rows`): each generated turn is one training row, its prompt (instruction,
  history, observation) on the context side and its reply on the response side, so only reply
  (action) tokens are in the loss (``trainer.sequences``' rule, reused through ``Group``).
  Replayed prefix turns have no row;
* the loss is the project's one clipped policy-gradient loss
  (``components.algos.losses.pg_token_losses``, verl's) on-policy: one epoch, so the ratio
  is 1, clipping never binds and the gradient is the policy gradient; aggregated as
  ``loss_agg_mode``. Its value (``train/loss``) is verl's surrogate at ratio 1, -sum(A w);
* validation is the success rate on held-out map seeds (one episode each); metrics are
  episode statistics (success, return, turns, invalid replies).

Checkpoints every ``ckpt_every`` updates carry weights, optimizer, method state, token meter
and metric history; sampling seeds are a function of (seed, step), so a resumed run continues
as the uninterrupted one would.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from components.agentic.episode_train_config import EpisodeTrainConfig
from components.agentic.rollout import (EpisodeContext, EpisodeGroup, EpisodeRun, Start, episode_runs,
                                        prompt_encoder, rollout_episodes, success_rate, to_gigpo_episodes)
from components.algos.advantages import adv_estimator
from components.algos.losses import pg_token_losses
from components.engine.base import SamplingParams, TokenMeter
from components.methods.base import Group
from components.methods.registry import build
from components.trainer import checkpoint
from components.trainer.loop import VALIDATION_SEED, FitLoop, training_tokens
from components.trainer.sequences import build_sequences, response_logprobs, token_weights

__all__ = ["EpisodeLoop", "EpisodeTrainer", "turn_rows", "success_rate"]


def turn_rows(runs: Sequence[EpisodeRun], cfg: EpisodeTrainConfig) -> list[Group]:
    """One ``Group`` (one row) per generated turn, its advantage in ``meta['advantages']``."""
    adv = adv_estimator(cfg.adv_estimator)(to_gigpo_episodes(runs), cfg)
    rows = []
    for i, (run, a) in enumerate(zip(runs, adv)):
        for t, (turn, at) in enumerate(zip(run.turns, a)):
            rows.append(Group(uid=f"{run.start.group_id()}#{i}.{t}", problem_uid=str(run.start.seed), answer="",
                              context_ids=turn.context_ids, prompt_len=len(turn.context_ids),
                              responses=[turn.response_ids], texts=[turn.text], rewards=[turn.reward],
                              finish_reasons=[turn.finish_reason], meta={"advantages": [at]}))
    return rows


class EpisodeLoop(FitLoop):
    """The loop's task hooks for episodes. A backend sets ``cfg`` (an
    :class:`EpisodeTrainConfig`), ``method`` (a method built for the agentic task), ``meter``, ``history``, and
    implements ``play`` plus the loop's backend hooks (``update``, ``restore``,
    ``save_checkpoint``, ``log_metrics``)."""

    cfg: EpisodeTrainConfig

    def play(self, starts: Sequence[Start], seed: int, purpose: str = "train_rollout") -> list[EpisodeRun]:
        """Every start's episodes, played to the end with sampling seed ``seed``."""
        raise NotImplementedError

    def training_set(self, seeds: Sequence[int], resources: dict[str, Any]) -> list[int]:
        if not seeds:
            raise ValueError(f"{self.cfg.method}: no training map seeds")
        self.method.setup(seeds, resources)
        return list(seeds)

    def batch_size(self) -> int:
        return self.cfg.batch_seeds

    def validation_set(self, val_seeds: Sequence[int]) -> list[int]:
        return list(val_seeds)[: self.cfg.val_seeds]

    def rollout(self, batch: list[int], step: int, rng: np.random.Generator) -> list[EpisodeGroup]:
        ctx = EpisodeContext(self.play, self.cfg.seed * 1_000_003 + 101 * step, step)
        return self.method.rollout(batch, ctx, rng)

    def validation_metrics(self, seeds: list[int], step: int) -> dict[str, float]:
        """Success rate of one episode per held-out map seed, the same sampling seeds every time."""
        with self.meter.tagged(step=step):
            runs = self.play([Start(int(s), (), f"val{s}", 1) for s in seeds], VALIDATION_SEED + self.cfg.seed,
                             purpose="validation")
        return {"val/accuracy": success_rate(runs)}

    def step_metrics(self, groups: list[EpisodeGroup], before: dict, after: dict) -> dict[str, float]:
        runs = episode_runs(groups)
        fresh = [r for r in runs if not r.start.prefix]
        replay = [r for r in runs if r.start.prefix]
        groups: dict[str, list[bool]] = {}
        for r in runs:
            groups.setdefault(r.start.group_id(), []).append(r.won)
        turns = [t for r in runs for t in r.turns]
        return {
            "reward/mean": success_rate(runs),          # success rate (the tables' training curve)
            "reward/fresh_mean": success_rate(fresh),
            "reward/replay_mean": success_rate(replay) if replay else math.nan,
            "episode/return_mean": float(np.mean([r.episode_return for r in runs])),
            "episode/new_turns_mean": float(np.mean([len(r.turns) for r in runs])),
            "episode/invalid_frac": float(np.mean([not t.valid for t in turns])) if turns else math.nan,
            "groups/mixed_frac": float(np.mean([len(set(v)) > 1 for v in groups.values()])),
            "groups/replay_frac": float(np.mean([bool(r.start.prefix) for r in runs])),
            "tokens/generated": float(after["generated_tokens"] - before["generated_tokens"]),
            "tokens/prompt": float(after["prompt_tokens"] - before["prompt_tokens"]),
            "tokens/discarded": float(after["discarded_tokens"] - before["discarded_tokens"]),
            "tokens/generated_cum": float(after["generated_tokens"]),
            "rollouts": float(len(runs)),
        }

    def summary(self) -> dict[str, Any]:
        tot = training_tokens(self.meter)
        vals = [h["val/accuracy"] for h in self.history if "val/accuracy" in h]
        out = {"method": self.cfg.method, "seed": self.cfg.seed, "steps": self.cfg.steps, "task": "agentic",
               "adv_estimator": self.cfg.adv_estimator,
               "generated_tokens": tot["generated_tokens"], "kept_generated_tokens": tot["kept_generated_tokens"],
               "discarded_tokens": tot["discarded_tokens"], "prompt_tokens": tot["prompt_tokens"],
               "rollouts": int(sum(h.get("rollouts", 0) for h in self.history)),
               "generated_turns": self.meter.totals("train_rollout")["sequences"],
               "final_val_accuracy": vals[-1] if vals else None, "max_new_tokens": self.cfg.max_new_tokens,
               "clip_ratio": None}
        if self.backend_name != "embedded":
            out["backend"] = self.backend_name
        return out


class EpisodeTrainer(EpisodeLoop):
    """The embedded backend: ``HFEngine`` on the model being trained, a torch update, local
    checkpoints (``components.trainer.checkpoint``)."""

    def __init__(self, cfg: EpisodeTrainConfig, model, tokenizer, make_env: Callable, tracker,
                 engine_factory=None, max_prompt_length: int | None = None):
        self.max_prompt_length = max_prompt_length
        self.cfg, self.model, self.tok, self.make_env, self.tracker = cfg, model, tokenizer, make_env, tracker
        self.meter = TokenMeter(method=cfg.method, seed=cfg.seed)
        if engine_factory is None:
            from components.engine.hf import HFEngine
            engine_factory = HFEngine
        self.engine = engine_factory(model, tokenizer, meter=self.meter)
        self.method = build(cfg.method, cfg.method_config, task="agentic")
        self.opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
        self.history: list[dict[str, float]] = []
        self.ckpt_root: Path | None = None

    # ------------------------------------------------------------------ loop hooks
    def play(self, starts: Sequence[Start], seed: int, purpose: str = "train_rollout") -> list[EpisodeRun]:
        c = self.cfg
        return rollout_episodes(self.engine, self.make_env, starts,
                                SamplingParams(c.temperature, c.top_p, c.max_new_tokens, seed), purpose,
                                encode=prompt_encoder(self.tok, c.prompt_template),
                                max_prompt_len=self.max_prompt_length)

    def restore(self) -> tuple[int, dict[str, Any] | None]:
        checkpoint.clean_partial(self.ckpt_root)
        last = checkpoint.latest(self.ckpt_root)
        if last is None:
            return 0, None
        state = checkpoint.load(last, self.model, self.opt, None)
        start = state["step"] + 1
        print(f"[train {self.cfg.method}] resumed from {last.name} (next step {start})", flush=True)
        return start, state

    def save_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        checkpoint.save(self.ckpt_root, step, self.model, self.opt, None, {"step": step, **state})
        getattr(self.tracker, "commit", lambda: None)()   # the rows this checkpoint covers reach MLflow

    def log_metrics(self, row: dict[str, float], step: int) -> None:
        self.tracker.log_metrics(row, step=step)

    # ------------------------------------------------------------------ one update
    def update(self, episode_groups: list[EpisodeGroup]) -> dict[str, float]:
        c = self.cfg
        groups = turn_rows(episode_runs(episode_groups), c)
        stats = {"loss": 0.0, "grad_norm": 0.0, "rows": float(len(groups)), "trained_rows": 0.0}
        if not groups:
            return stats
        seqs = build_sequences(groups, self.tok.pad_token_id)
        adv = torch.tensor([g.meta["advantages"][0] for g in groups], dtype=torch.float32)
        w = token_weights(seqs.response_mask, c.loss_agg_mode)
        rows = torch.nonzero(adv != 0).flatten()     # a zero advantage contributes exactly nothing
        stats["trained_rows"] = float(len(rows))
        if len(rows) == 0:
            return stats
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        for i in range(0, len(rows), c.micro_batch):
            idx = rows[i:i + c.micro_batch]
            att = seqs.attention[idx]
            T = int(att.sum(-1).max())
            logp, _ = response_logprobs(self.model, seqs.input_ids[idx, :T], att[:, :T])
            # on-policy: old = logp, so the ratio is 1, clipping never binds and the gradient
            # is the policy gradient -A grad(logp)
            pg, _, _, _ = pg_token_losses(logp, logp.detach(), adv[idx][:, None])
            loss = (pg * w[idx, :T]).sum()
            loss.backward()
            stats["loss"] += float(loss.detach())
        stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip))
        self.opt.step()
        return stats

    # ------------------------------------------------------------------ entry points
    def fit(self, train_seeds: Sequence[int], val_seeds: Sequence[int], resources: dict[str, Any],
            work_dir: Path) -> dict[str, Any]:
        self.ckpt_root = work_dir / "checkpoints"
        return self.run_loop(train_seeds, val_seeds, resources, self.tok)

    def save_outputs(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out_dir / "model", safe_serialization=True)
        self.tok.save_pretrained(out_dir / "model")
        self.write_records(out_dir)
