"""The episodic trainer: multi-turn rollouts, GiGPO advantages, one policy-gradient update per step.

One update: the method picks start states (map seeds, replayed turn prefixes) for the step's
batch of map seeds; :func:`rollout_episodes` plays them turn by turn; GiGPO
(``components.algos.gigpo``) gives every generated turn an advantage; each generated turn is
one training row, its prompt (instruction, history, observation) on the context side and its
reply on the response side, so only reply tokens are in the loss (``trainer.batch``'s rule,
reused through ``Group``). Replayed prefix turns have no row. The loss is the on-policy
policy gradient (one epoch, so the PPO ratio is 1 and clipping never binds), aggregated as
``loss_agg_mode``. Checkpoints every ``ckpt_every`` updates carry weights, optimizer, method
state, token meter and metric history; sampling seeds are a function of (seed, step).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from components.agentic.config import EpisodeTrainConfig
from components.agentic.methods import build_episodic
from components.agentic.rollout import (EpisodeRun, Start, prompt_encoder, rollout_episodes, success_rate,
                                        to_gigpo_episodes)
from components.algos.gigpo import gigpo_advantages
from components.engine.base import SamplingParams, TokenMeter
from components.methods.base import Group
from components.progress import step_progress
from components.trainer import checkpoint
from components.trainer.loop import batch_order
from components.trainer.sequences import build_sequences, response_logprobs, token_weights

__all__ = ["EpisodeTrainer", "turn_rows", "success_rate"]


def turn_rows(runs: Sequence[EpisodeRun], cfg: EpisodeTrainConfig) -> list[Group]:
    """One ``Group`` (one row) per generated turn, its advantage in ``meta['advantages']``."""
    adv = gigpo_advantages(to_gigpo_episodes(runs), gamma=cfg.gamma,
                           step_weight=cfg.step_weight if cfg.adv_estimator == "gigpo" else 0.0,
                           mode=cfg.gigpo_mode, episode_stats=cfg.episode_stats)
    rows = []
    for i, (run, a) in enumerate(zip(runs, adv.advantages)):
        for t, (turn, at) in enumerate(zip(run.turns, a)):
            rows.append(Group(uid=f"{run.start.group_id()}#{i}.{t}", problem_uid=str(run.start.seed), answer="",
                              context_ids=turn.context_ids, prompt_len=len(turn.context_ids),
                              responses=[turn.response_ids], texts=[turn.text], rewards=[turn.reward],
                              finish_reasons=[turn.finish_reason], meta={"advantages": [at]}))
    return rows


class EpisodeTrainer:
    def __init__(self, cfg: EpisodeTrainConfig, model, tokenizer, make_env: Callable, tracker,
                 engine_factory=None, max_prompt_length: int | None = None):
        self.max_prompt_length = max_prompt_length
        self.cfg, self.model, self.tok, self.make_env, self.tracker = cfg, model, tokenizer, make_env, tracker
        self.meter = TokenMeter(method=cfg.method, seed=cfg.seed)
        if engine_factory is None:
            from components.engine.hf import HFEngine
            engine_factory = HFEngine
        self.engine = engine_factory(model, tokenizer, meter=self.meter)
        self.method = build_episodic(cfg.method, cfg.method_config)
        self.opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
        self.history: list[dict[str, float]] = []

    def sampling(self, seed: int) -> SamplingParams:
        c = self.cfg
        return SamplingParams(c.temperature, c.top_p, c.max_new_tokens, seed)

    def play(self, starts: Sequence[Start], seed: int, purpose: str = "train_rollout") -> list[EpisodeRun]:
        return rollout_episodes(self.engine, self.make_env, starts, self.sampling(seed), purpose,
                                encode=prompt_encoder(self.tok, self.cfg.prompt_template),
                                max_prompt_len=self.max_prompt_length)

    def validate(self, seeds: Sequence[int], step: int) -> float:
        with self.meter.tagged(step=step):
            runs = self.play([Start(int(s), (), f"val{s}", 1) for s in seeds], 7_919 + self.cfg.seed,
                             purpose="validation")
        return success_rate(runs)

    # ------------------------------------------------------------------ one update
    def update(self, runs: Sequence[EpisodeRun]) -> dict[str, float]:
        c = self.cfg
        groups = turn_rows(runs, c)
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
            loss = (-adv[idx][:, None] * logp * w[idx, :T]).sum()
            loss.backward()
            stats["loss"] += float(loss.detach())
        stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip))
        self.opt.step()
        return stats

    # ------------------------------------------------------------------ the loop
    def fit(self, train_seeds: Sequence[int], val_seeds: Sequence[int], resources: dict[str, Any],
            work_dir: Path) -> dict[str, Any]:
        c = self.cfg
        if not train_seeds:
            raise ValueError(f"{c.method}: no training map seeds")
        self.method.setup(train_seeds, resources)
        val = list(val_seeds)[: c.val_seeds]
        root = work_dir / "checkpoints"
        checkpoint.clean_partial(root)
        start = 0
        if (last := checkpoint.latest(root)) is not None:
            state = checkpoint.load(last, self.model, self.opt, None)
            self.method.load_state_dict(state["method"])
            self.meter.load_state_dict(state["meter"])
            self.history, start = state["history"], state["step"] + 1
            print(f"[train {c.method}] resumed from {last.name} (next step {start})", flush=True)
        if start == 0 and val:
            self._log({"val/accuracy": self.validate(val, -1)}, step=0)
        with step_progress(f"train {c.method} s{c.seed} (episodes)", c.steps, start) as bar:
            for step in range(start, c.steps):
                t0 = time.monotonic()
                batch = [train_seeds[i] for i in batch_order(len(train_seeds), c.seed, step, c.batch_seeds)]
                starts = self.method.starts(batch, step, np.random.default_rng([c.seed, step, 17]))
                before = self.meter.totals("train_rollout")
                with self.meter.tagged(step=step):
                    runs = self.play(starts, c.seed * 1_000_003 + 101 * step)
                t_gen = time.monotonic() - t0
                self.method.observe(runs, step)
                row = self._step_metrics(runs, before)
                row.update({f"train/{k}": v for k, v in self.update(runs).items()})
                row.update({"time/step_s": time.monotonic() - t0, "time/generate_s": t_gen})
                row.update({f"method/{k}": v for k, v in self.method.buffer_stats().items()})
                if val and ((step + 1) % c.val_every == 0 or step + 1 == c.steps):
                    row["val/accuracy"] = self.validate(val, step)
                self._log(row, step=step + 1)
                if (step + 1) % c.ckpt_every == 0 or step + 1 == c.steps:
                    checkpoint.save(root, step, self.model, self.opt, None,
                                    {"step": step, "method": self.method.state_dict(),
                                     "meter": self.meter.state_dict(), "history": self.history})
                bar.advance(1, info=f"success {row['reward/mean']:.3f} replay {row['groups/replay_frac']:.2f}")
        return self.summary()

    def _step_metrics(self, runs: Sequence[EpisodeRun], before: dict) -> dict[str, float]:
        after = self.meter.totals("train_rollout")
        fresh = [r for r in runs if not r.start.prefix]
        replay = [r for r in runs if r.start.prefix]
        groups: dict[str, list[bool]] = {}
        for r in runs:
            groups.setdefault(r.start.group_id(), []).append(r.won)
        nan = math.nan
        return {
            "reward/mean": success_rate(runs),          # success rate (the tables' training curve)
            "reward/fresh_mean": success_rate(fresh), "reward/replay_mean": success_rate(replay) if replay else nan,
            "episode/return_mean": float(np.mean([r.episode_return for r in runs])),
            "episode/new_turns_mean": float(np.mean([len(r.turns) for r in runs])),
            "episode/invalid_frac": float(np.mean([not t.valid for r in runs for t in r.turns])),
            "groups/mixed_frac": float(np.mean([len(set(v)) > 1 for v in groups.values()])),
            "groups/replay_frac": float(np.mean([bool(r.start.prefix) for r in runs])),
            "tokens/generated": float(after["generated_tokens"] - before["generated_tokens"]),
            "tokens/prompt": float(after["prompt_tokens"] - before["prompt_tokens"]),
            "tokens/generated_cum": float(after["generated_tokens"]),
            "rollouts": float(len(runs)),
        }

    def _log(self, row: dict[str, float], step: int) -> None:
        clean = {k: float(v) for k, v in row.items() if v is not None and not math.isnan(float(v))}
        self.tracker.log_metrics(clean, step=step)
        self.history.append({"step": step, **clean})

    def summary(self) -> dict[str, Any]:
        tot = self.meter.totals("train_rollout")
        vals = [h["val/accuracy"] for h in self.history if "val/accuracy" in h]
        return {"method": self.cfg.method, "seed": self.cfg.seed, "steps": self.cfg.steps, "task": "agentic",
                "adv_estimator": self.cfg.adv_estimator,
                "generated_tokens": tot["generated_tokens"], "prompt_tokens": tot["prompt_tokens"],
                "rollouts": int(sum(h.get("rollouts", 0) for h in self.history)),
                "generated_turns": tot["sequences"],
                "final_val_accuracy": vals[-1] if vals else None, "max_new_tokens": self.cfg.max_new_tokens,
                "clip_ratio": None}

    def save_outputs(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out_dir / "model", safe_serialization=True)
        self.tok.save_pretrained(out_dir / "model")
        with open(out_dir / "metrics.jsonl", "w") as f:   # wall-clock fields to MLflow only (see loop.write_records)
            for h in self.history:
                f.write(json.dumps({k: v for k, v in h.items() if not k.startswith("time/")}) + "\n")
        (out_dir / "tokens.json").write_text(json.dumps(self.meter.to_rows()))
        (out_dir / "method_state.json").write_text(json.dumps(self.method.state_dict()))
        (out_dir / "summary.json").write_text(json.dumps(self.summary(), indent=2))
