"""The embedded trainer, for every task: torch + transformers on CPU (or one GPU), no framework.

The loop is :class:`components.trainer.loop.FitLoop` and what differs between math and
episodes is its ``task`` (``components.trainer.task``); this backend supplies the rollout
engine (``HFEngine`` on the model being trained) and the update on the task's loss rows:
advantages (within each group from the outcome estimator, or the task's: GiGPO's per turn;
the method's own terms applied, ``Method.sample_advantages`` / ``advantage_weight``),
the clipped policy-gradient loss of ``components.algos.losses`` (verl's: log-ratio clamp and
dual clip) or NLL for supervised groups, aggregated as configured over micro-batches. As verl's
actor: the step's groups split into mini-batches of ``ppo_mini_batch_size`` prompts (default:
the whole batch), one optimizer step each, ``ppo_epochs`` passes, the ratio against the
rollout policy's log-probs once there is more than one step. Replayed prefixes are context, so
they never reach the loss. Checkpoints hold everything a resumed run needs to continue
identically: weights, optimizer, method state, token meter, metric history (sampling seeds are a
function of (seed, step), so no RNG state has to be carried).
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from components.algos.advantages import adv_estimator
from components.algos.losses import CLIP_RATIO_C, kl_penalty, pg_token_losses
from components.data.prompting import encode_prompt
from components.engine.base import SamplingParams, TokenMeter
from components.methods.base import GradeFn, RolloutContext, advantage_terms
from components.methods.registry import build
from components.trainer import checkpoint
from components.trainer.loop import BEST_FILE, FitLoop
from components.trainer.sequences import build_sequences, response_logprobs, token_weights
from components.trainer.task import MathTask, Task
from components.trainer.train_config import TrainConfig


def mini_batch_bounds(group_sizes: Sequence[int], k: int) -> list[tuple[int, int]]:
    """Row ranges of ``k`` mini-batches of whole groups (as even in groups as they split):
    ``ppo_mini_batch_size`` prompts each when every prompt has one group."""
    ends = np.cumsum([0, *group_sizes])
    parts = np.array_split(np.arange(len(group_sizes)), k)
    return [(int(ends[p[0]]), int(ends[p[-1] + 1])) for p in parts if len(p)]


class EmbeddedTrainer(FitLoop):
    """``task``: a :class:`~components.trainer.task.Task` (``task_for``), or the math task's
    grade function."""

    def __init__(self, cfg: TrainConfig, model, tokenizer, task: Task | GradeFn, tracker, engine_factory=None):
        self.task = task if isinstance(task, Task) else MathTask(task)
        if self.task.name != cfg.task:
            raise ValueError(f"train: the config's task is {cfg.task}, the trainer was given the {self.task.name} task")
        self.cfg, self.model, self.tok, self.tracker = cfg, model, tokenizer, tracker
        self.meter = TokenMeter(method=cfg.method, seed=cfg.seed)
        if engine_factory is None:
            from components.engine.hf import HFEngine
            engine_factory = HFEngine
        self.engine = engine_factory(model, tokenizer, meter=self.meter)
        self.method = build(cfg.method, cfg.method_config, task=cfg.task)
        self.ref = None
        if cfg.kl_coef > 0:
            self.ref = copy.deepcopy(model).eval().requires_grad_(False)
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
        other = [p for n, p in model.named_parameters() if p.ndim < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": other, "weight_decay": 0.0}], lr=cfg.lr)
        warm = max(cfg.warmup_steps, 1)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm))
        self.history: list[dict[str, float]] = []
        self.ckpt_root: Path | None = None

    # ------------------------------------------------------------------ loop hooks
    def rollout_ctx(self, step: int, seed_base: int) -> RolloutContext:
        c = self.cfg
        return RolloutContext(engine=self.engine, grade=self.task.grade,
                              encode_prompt=lambda p: encode_prompt(p, self.tok, c.prompt_template),
                              sampling=SamplingParams(c.temperature, c.top_p, c.max_new_tokens, seed_base),
                              step=step)

    def play(self, starts, seed: int, purpose: str = "train_rollout"):
        """Episodes of the episodic task's environment from ``starts`` (its ``EpisodeContext``)."""
        return self.task.play(self, starts, seed, purpose)

    def restore(self) -> tuple[int, dict[str, Any] | None]:
        checkpoint.clean_partial(self.ckpt_root)
        last = checkpoint.latest(self.ckpt_root)
        if last is None:
            return 0, None
        state = checkpoint.load(last, self.model, self.opt, self.sched)
        start = state["step"] + 1
        print(f"[train {self.cfg.method}] resumed from {last.name} (next step {start})", flush=True)
        return start, state

    def save_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        checkpoint.save(self.ckpt_root, step, self.model, self.opt, self.sched, {"step": step, **state})
        getattr(self.tracker, "commit", lambda: None)()   # the rows this checkpoint covers reach MLflow

    def log_metrics(self, row: dict[str, float], step: int) -> None:
        self.tracker.log_metrics(row, step=step)

    def best_dir(self) -> Path:
        return self.ckpt_root.parent / "best"

    def best_weights(self, dst: Path) -> None:
        self.model.save_pretrained(dst, safe_serialization=True)

    def extra_metrics(self) -> dict[str, float]:
        return {"lr": self.sched.get_last_lr()[0]}

    # ------------------------------------------------------------------ one update
    def update(self, rollouts: list) -> dict[str, float]:
        c = self.cfg
        groups, task_adv = self.task.loss_rows(rollouts, c)
        dev = next(self.model.parameters()).device
        seqs = build_sequences(groups, self.tok.pad_token_id).to(dev)
        if len(seqs) == 0:
            return {"loss": 0.0, "grad_norm": 0.0}
        # a method may give exact per-sample advantages (Reinforce-Ada-Seq: statistics over all
        # generated samples, not only the kept ones) and weight a group's advantages
        # (Reinforce-Ada-Est's 1/sqrt(p) factor)
        if task_adv is None:
            adv = adv_estimator(c.adv_estimator)(seqs, c)
        else:
            adv = torch.tensor(task_adv, dtype=torch.float32, device=dev)
        fixed, weight = advantage_terms(self.method, groups)
        fixed = torch.tensor(fixed, dtype=adv.dtype, device=dev)
        adv = torch.where(torch.isnan(fixed), adv, fixed) * torch.tensor(weight, device=dev)
        adv = torch.where(seqs.supervised, torch.zeros_like(adv), adv)
        mask = seqs.response_mask
        # rows whose advantages are per token, from the policy's entropy (RL-ZVP)
        per_token = torch.tensor([t for g, t in zip(groups, self.method.token_advantage_groups(groups))
                                  for _ in range(g.n)], dtype=torch.bool, device=dev)
        pg_mask, sup_mask = mask * (~seqs.supervised)[:, None], mask * seqs.supervised[:, None]
        # sequences with a zero advantage contribute exactly nothing without a KL term: skip them
        keep = seqs.supervised | (adv != 0) | per_token if c.kl_coef == 0 else torch.ones_like(seqs.supervised)
        rows = torch.nonzero(keep).flatten()
        stats = {"loss": 0.0, "pg_clipfrac": 0.0, "entropy": 0.0, "trained_sequences": float(len(rows))}
        if len(rows) == 0:
            return {**stats, "grad_norm": 0.0, "optimizer_steps": 0.0}
        # mini-batches of whole groups, each normalised on its own (verl's agg_loss per
        # mini-batch), then split into micro-batches of the kept rows
        w_pg, w_sup, plan = torch.zeros_like(mask), torch.zeros_like(mask), []
        for lo, hi in mini_batch_bounds([g.n for g in groups], c.mini_batches):
            w_pg[lo:hi] = token_weights(pg_mask[lo:hi], c.loss_agg_mode, c.max_new_tokens)
            w_sup[lo:hi] = token_weights(sup_mask[lo:hi], "token-mean")
            sel = rows[(rows >= lo) & (rows < hi)]
            plan.append([sel[i:i + c.micro_batch] for i in range(0, len(sel), c.micro_batch)])
        self.model.train()
        # once the policy moves within the step, the ratio is against the rollout policy
        old_logp = None
        if c.updates_per_step > 1:
            with torch.no_grad():
                old_logp = [[response_logprobs(self.model, seqs.input_ids[idx], seqs.attention[idx])[0]
                             for idx in micro] for micro in plan]
        n_steps, gn = 0, torch.tensor(0.0)
        for _ in range(c.ppo_epochs):
            ent_sum, ent_n, clipped = 0.0, 0.0, 0.0
            for b, micro in enumerate(plan):
                if not micro:       # only zero-advantage rows: no gradient, so no step
                    continue
                self.opt.zero_grad(set_to_none=True)
                for j, idx in enumerate(micro):
                    ids, att, m = seqs.input_ids[idx], seqs.attention[idx], mask[idx]
                    T = int(att.sum(-1).max())
                    ids, att, m = ids[:, :T], att[:, :T], m[:, :T]
                    logp, ent = response_logprobs(self.model, ids, att, with_entropy=True)
                    old = logp.detach() if old_logp is None else old_logp[b][j][:, :T]
                    a = adv[idx][:, None]
                    if per_token[idx].any():
                        tok_adv = self.method.token_advantages(ent, m, seqs.rewards[idx], rows=idx, logp=logp.detach())
                        a = torch.where(per_token[idx][:, None], tok_adv, a.expand_as(tok_adv))
                    pg, is_clipped, _, _ = pg_token_losses(logp, old, a, c.clip_low, c.clip_high, CLIP_RATIO_C)
                    loss = (pg * w_pg[idx, :T]).sum() + (-logp * w_sup[idx, :T]).sum()
                    if self.ref is not None:
                        with torch.no_grad():
                            ref_logp, _ = response_logprobs(self.ref, ids, att)
                        loss = loss + c.kl_coef * (kl_penalty(logp, ref_logp, "low_var_kl") * w_pg[idx, :T]).sum()
                    loss.backward()
                    stats["loss"] += float(loss.detach())
                    ent_sum += float((ent.detach() * m).sum())
                    ent_n += float(m.sum())
                    clipped += float((is_clipped.float() * m).sum())
                gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)
                self.opt.step()
                n_steps += 1
        self.sched.step()
        stats.update(grad_norm=float(gn), entropy=ent_sum / max(ent_n, 1.0), pg_clipfrac=clipped / max(ent_n, 1.0),
                     optimizer_steps=float(n_steps))
        return stats

    # ------------------------------------------------------------------ entry points
    def fit(self, items: Sequence[Any], val_items: Sequence[Any], resources: dict[str, Any],
            work_dir: Path, on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
        """Train on ``items`` (problems, or map seeds), validating on ``val_items``."""
        self.ckpt_root = work_dir / "checkpoints"
        return self.run_loop(items, val_items, resources, self.tok, on_step=on_step)

    def save_outputs(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        kept = self.output_model_dir()
        if kept is None:
            self.model.save_pretrained(out_dir / "model", safe_serialization=True)
        else:
            shutil.copytree(kept, out_dir / "model", dirs_exist_ok=True, ignore=shutil.ignore_patterns(BEST_FILE))
        self.tok.save_pretrained(out_dir / "model")
        self.write_records(out_dir)
