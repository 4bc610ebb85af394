"""The embedded trainer: torch + transformers on CPU (or one GPU), no framework.

One step: the method decides the rollouts and the engine generates them; the grader
scores them; advantages are computed within each group; the clipped policy-gradient
loss (or NLL for supervised groups) is aggregated as configured; one optimizer step.
Replayed prefixes are context, so they never reach the loss. Checkpoints every
``ckpt_every`` steps hold everything a resumed run needs to continue identically:
weights, optimizer, method state, token meter, metric history (sampling seeds are a
function of (seed, step), so no RNG state has to be carried).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from components.algos.advantages import grpo_advantages, rloo_advantages
from components.data.prompting import encode_prompt
from components.data.schema import Problem
from components.engine.base import SamplingParams, TokenMeter
from components.methods.base import Group, RolloutContext, advantage_terms
from components.methods.registry import build
from components.progress import step_progress
from components.trainer.config import TrainConfig
from components.trainer import checkpoint
from components.trainer.batch import build_sequences, response_logprobs, token_weights


def group_advantages(seqs, estimator: str) -> torch.Tensor:
    if estimator == "rloo":
        return rloo_advantages(seqs.rewards, seqs.group_ids)
    return grpo_advantages(seqs.rewards, seqs.group_ids, norm_by_std=(estimator == "grpo"))


def batch_order(n: int, seed: int, step: int, batch: int) -> list[int]:
    """Indices of the step's batch: epochs of seeded permutations, concatenated."""
    out, pos = [], step * batch
    while len(out) < batch:
        epoch, off = divmod(pos, n)
        perm = np.random.default_rng([seed, epoch]).permutation(n)
        take = min(batch - len(out), n - off)
        out.extend(perm[off:off + take].tolist())
        pos += take
    return out


class EmbeddedTrainer:
    def __init__(self, cfg: TrainConfig, model, tokenizer, grade, tracker, engine_factory=None):
        self.cfg, self.model, self.tok, self.grade, self.tracker = cfg, model, tokenizer, grade, tracker
        self.meter = TokenMeter(method=cfg.method, seed=cfg.seed)
        if engine_factory is None:
            from components.engine.hf import HFEngine
            engine_factory = HFEngine
        self.engine = engine_factory(model, tokenizer, meter=self.meter)
        self.method = build(cfg.method, cfg.method_config)
        self.ref = None
        if cfg.kl_coef > 0:
            import copy
            self.ref = copy.deepcopy(model).eval().requires_grad_(False)
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
        other = [p for n, p in model.named_parameters() if p.ndim < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": other, "weight_decay": 0.0}], lr=cfg.lr)
        warm = max(cfg.warmup_steps, 1)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm))
        self.history: list[dict[str, float]] = []
        self.val_clip_ratio = float("nan")

    # ------------------------------------------------------------------ helpers
    def encode(self, p: Problem) -> tuple[int, ...]:
        return encode_prompt(p, self.tok, self.cfg.prompt_template)

    def rollout_ctx(self, step: int, seed_base: int) -> RolloutContext:
        c = self.cfg
        return RolloutContext(engine=self.engine, grade=self.grade, encode_prompt=self.encode,
                              sampling=SamplingParams(c.temperature, c.top_p, c.max_new_tokens, seed_base),
                              step=step)

    def validate(self, problems: Sequence[Problem], step: int) -> float:
        if not problems:
            return float("nan")
        ctx = self.rollout_ctx(0, 7_919 + self.cfg.seed)   # same validation samples seed every time
        items = ctx.prompt_items(problems)
        with self.meter.tagged(step=step):
            groups = ctx.sample_groups(items, self.cfg.val_samples, purpose="validation")
        self.val_clip_ratio = float(np.mean([f == "length" for g in groups for f in g.finish_reasons]))
        return float(np.mean([r for g in groups for r in g.rewards]))

    # ------------------------------------------------------------------ one update
    def update(self, groups: list[Group]) -> dict[str, float]:
        c = self.cfg
        seqs = build_sequences(groups, self.tok.pad_token_id)
        if len(seqs) == 0:
            return {"loss": 0.0, "grad_norm": 0.0}
        # a method may give exact per-sample advantages (Reinforce-Ada-Seq: statistics over all
        # generated samples, not only the kept ones) and weight a group's advantages
        # (Reinforce-Ada-Est's 1/sqrt(p) factor)
        adv = group_advantages(seqs, c.adv_estimator)
        fixed, weight = advantage_terms(self.method, groups)
        fixed = torch.tensor(fixed, dtype=adv.dtype)
        adv = torch.where(torch.isnan(fixed), adv, fixed) * torch.tensor(weight)
        adv = torch.where(seqs.supervised, torch.zeros_like(adv), adv)
        mask = seqs.response_mask
        # rows whose advantages are per token, from the policy's entropy (RL-ZVP)
        zvp = torch.tensor([t for g, t in zip(groups, self.method.token_advantage_groups(groups))
                            for _ in range(g.n)], dtype=torch.bool)
        horizon = c.max_new_tokens
        w_pg = token_weights(mask * (~seqs.supervised)[:, None], c.loss_agg_mode, horizon)
        w_sup = token_weights(mask * seqs.supervised[:, None], "token-mean")
        # sequences with a zero advantage contribute exactly nothing without a KL term: skip them
        keep = seqs.supervised | (adv != 0) | zvp if c.kl_coef == 0 else torch.ones(len(seqs), dtype=torch.bool)
        rows = torch.nonzero(keep).flatten()
        stats = {"loss": 0.0, "pg_clipfrac": 0.0, "entropy": 0.0, "trained_sequences": float(len(rows))}
        if len(rows) == 0:
            return {**stats, "grad_norm": 0.0}
        self.model.train()
        old_logp = None
        if c.ppo_epochs > 1:
            with torch.no_grad():
                old_logp = torch.cat([response_logprobs(self.model, seqs.input_ids[rows[i:i + c.micro_batch]],
                                                        seqs.attention[rows[i:i + c.micro_batch]])[0]
                                      for i in range(0, len(rows), c.micro_batch)])
        for _ in range(c.ppo_epochs):
            self.opt.zero_grad(set_to_none=True)
            ent_sum, ent_n, clipped = 0.0, 0.0, 0.0
            for i in range(0, len(rows), c.micro_batch):
                idx = rows[i:i + c.micro_batch]
                ids, att, m = seqs.input_ids[idx], seqs.attention[idx], mask[idx]
                T = int(att.sum(-1).max())
                ids, att, m = ids[:, :T], att[:, :T], m[:, :T]
                logp, ent = response_logprobs(self.model, ids, att, with_entropy=True)
                old = logp.detach() if old_logp is None else old_logp[i:i + len(idx), :T]
                ratio = torch.exp(logp - old)
                a = adv[idx][:, None]
                if zvp[idx].any():
                    tok_adv = self.method.token_advantages(ent, m, seqs.rewards[idx])
                    a = torch.where(zvp[idx][:, None], tok_adv, a.expand_as(tok_adv))
                pg = torch.maximum(-a * ratio, -a * ratio.clamp(1 - c.clip_low, 1 + c.clip_high))
                loss = (pg * w_pg[idx, :T]).sum() + (-logp * w_sup[idx, :T]).sum()
                if self.ref is not None:
                    with torch.no_grad():
                        ref_logp, _ = response_logprobs(self.ref, ids, att)
                    d = (ref_logp - logp).clamp(-20, 20)
                    kl = (torch.exp(d) - d - 1).clamp(-10, 10)     # k3 / "low_var_kl", as verl
                    loss = loss + c.kl_coef * (kl * w_pg[idx, :T]).sum()
                loss.backward()
                stats["loss"] += float(loss.detach())
                ent_sum += float((ent.detach() * m).sum())
                ent_n += float(m.sum())
                clipped += float((((ratio - 1).abs() > c.clip_low).float() * m).sum())
            gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)
            self.opt.step()
        self.sched.step()
        stats.update(grad_norm=float(gn), entropy=ent_sum / max(ent_n, 1.0), pg_clipfrac=clipped / max(ent_n, 1.0))
        return stats

    # ------------------------------------------------------------------ the loop
    def fit(self, problems: Sequence[Problem], val_problems: Sequence[Problem], resources: dict[str, Any],
            work_dir: Path, on_step: Callable[[int], None] | None = None, progress: bool = True) -> dict[str, Any]:
        c = self.cfg
        self.method.setup(problems, {**resources, "tokenizer": self.tok})
        train_set = self.method.training_problems(problems)
        if not train_set:
            raise ValueError(f"{c.method}: no training problems")
        val_set = list(val_problems)[: c.val_size]
        ckpt_root = work_dir / "checkpoints"
        checkpoint.clean_partial(ckpt_root)
        start = 0
        last = checkpoint.latest(ckpt_root)
        if last is not None:
            state = checkpoint.load(last, self.model, self.opt, self.sched)
            self.method.load_state_dict(state["method"])
            self.meter.load_state_dict(state["meter"])
            self.history = state["history"]
            start = state["step"] + 1
            print(f"[train {c.method}] resumed from {last.name} (next step {start})", flush=True)
        if start == 0 and val_set:
            acc0 = self.validate(val_set, -1)
            self._log({"val/accuracy": acc0, "val/clip_ratio": self.val_clip_ratio}, step=0)
        with step_progress(f"train {c.method} s{c.seed}", c.steps, start) as bar:
            for step in range(start, c.steps):
                t0 = time.monotonic()
                batch = [train_set[i] for i in batch_order(len(train_set), c.seed, step, c.batch_prompts)]
                rng = np.random.default_rng([c.seed, step, 17])
                before = self.meter.totals()
                with self.meter.tagged(step=step):
                    groups = self.method.rollout(batch, self.rollout_ctx(step, c.seed), rng)
                t_gen = time.monotonic() - t0
                self.method.observe(groups)
                upd = self.update(groups)
                after = self.meter.totals()
                row = self._step_metrics(groups, before, after)
                row.update({f"train/{k}": v for k, v in upd.items()})
                row.update({"time/step_s": time.monotonic() - t0, "time/generate_s": t_gen,
                            "lr": self.sched.get_last_lr()[0]})
                row.update({f"method/{k}": v for k, v in self.method.step_stats().items()})
                if val_set and ((step + 1) % c.val_every == 0 or step + 1 == c.steps):
                    row["val/accuracy"] = self.validate(val_set, step)
                    row["val/clip_ratio"] = self.val_clip_ratio
                self._log(row, step=step + 1)
                if (step + 1) % c.ckpt_every == 0 or step + 1 == c.steps:
                    checkpoint.save(ckpt_root, step, self.model, self.opt, self.sched,
                                    {"step": step, "method": self.method.state_dict(),
                                     "meter": self.meter.state_dict(), "history": self.history})
                bar.advance(1, info=f"reward {row['reward/mean']:.3f} mixed {row['groups/mixed_frac']:.2f}")
                if on_step is not None:
                    on_step(step)
        return self.summary()

    def _step_metrics(self, groups: list[Group], before: dict, after: dict) -> dict[str, float]:
        rl = [g for g in groups if not g.supervised]
        rewards = [r for g in rl for r in g.rewards]
        fresh = [r for g in rl if not g.is_replay for r in g.rewards]
        replay = [r for g in rl if g.is_replay for r in g.rewards]
        lens = [len(x) for g in groups for x in g.responses]
        finish = [f for g in rl for f in g.finish_reasons]
        nan = float("nan")
        return {
            "reward/mean": float(np.mean(rewards)) if rewards else nan,
            "reward/fresh_mean": float(np.mean(fresh)) if fresh else nan,
            "reward/replay_mean": float(np.mean(replay)) if replay else nan,
            "groups/mixed_frac": float(np.mean([g.mixed for g in rl])) if rl else nan,
            "groups/replay_frac": float(np.mean([g.is_replay for g in rl])) if rl else 0.0,
            "response/length_mean": float(np.mean(lens)) if lens else 0.0,
            # share of sampled responses cut off by the response budget (verl's name)
            "response_length/clip_ratio": float(np.mean([f == "length" for f in finish])) if finish else nan,
            "tokens/generated": float(after["generated_tokens"] - before["generated_tokens"]),
            "tokens/prompt": float(after["prompt_tokens"] - before["prompt_tokens"]),
            "tokens/generated_cum": float(self.meter.totals("train_rollout")["generated_tokens"]),
            "rollouts": float(after["sequences"] - before["sequences"]),
        }

    def _log(self, row: dict[str, float], step: int) -> None:
        clean = {k: float(v) for k, v in row.items() if v is not None and not math.isnan(float(v))}
        self.tracker.log_metrics(clean, step=step)
        self.history.append({"step": step, **clean})

    def summary(self) -> dict[str, Any]:
        tot = self.meter.totals("train_rollout")
        last_val = [h["val/accuracy"] for h in self.history if "val/accuracy" in h]
        clip = [h["response_length/clip_ratio"] for h in self.history if "response_length/clip_ratio" in h]
        return {"method": self.cfg.method, "seed": self.cfg.seed, "steps": self.cfg.steps,
                "generated_tokens": tot["generated_tokens"], "prompt_tokens": tot["prompt_tokens"],
                "rollouts": tot["sequences"], "final_val_accuracy": last_val[-1] if last_val else None,
                "max_new_tokens": self.cfg.max_new_tokens,
                "clip_ratio": float(np.mean(clip)) if clip else None}

    def save_outputs(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out_dir / "model", safe_serialization=True)
        self.tok.save_pretrained(out_dir / "model")
        self.write_records(out_dir)

    def write_records(self, out_dir: Path) -> None:
        """The run's records beside ``model/`` (shared with the verl backend's outputs)."""
        with open(out_dir / "metrics.jsonl", "w") as f:
            for h in self.history:
                f.write(json.dumps(h) + "\n")
        (out_dir / "tokens.json").write_text(json.dumps(self.meter.to_rows()))
        (out_dir / "method_state.json").write_text(json.dumps(self.method.state_dict()))
        (out_dir / "summary.json").write_text(json.dumps(self.summary(), indent=2))
