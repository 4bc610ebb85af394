"""The training loop every trainer runs: math and episodic, embedded and verl.

One step: the method picks the batch's rollouts and the backend's engine generates them
(the grader scores them inside ``RolloutContext.sample_groups``); the method observes the
groups; the backend's update turns them into advantages and one optimizer step; the step's
metrics row is logged; every ``ckpt_every`` steps a checkpoint; every ``val_every`` steps
validation on the held-out prompts.

    rollout -> observe -> update (advantages, loss, step) -> metrics -> validation -> checkpoint

A backend subclasses :class:`FitLoop` and supplies only what differs: its rollout engine
(``rollout_ctx`` on math, ``play`` on episodes), its actor update (``update``), where
checkpoints live (``restore`` / ``save_checkpoint``) and where metrics go (``log_metrics``),
plus the hooks around the step that a server-based engine needs (``begin_step``,
``after_rollout``, ``after_update``). What differs between tasks (the items, the rollout
context, the loss rows, the metrics) is the loop's ``task`` (``components.trainer.task``):
math by default, ``components.agentic.task.EpisodeTask`` on episodes.

The checkpoint is written after the step's row is in the history, so a resumed run keeps
every step's metrics. With ``keep_best: val`` a validation that beats every earlier one (of a
trained policy) copies that step's checkpoint weights to ``best_dir()``, with ``best.json``
naming the step and accuracy; the choice rides in the checkpoint state, so a resumed run keeps
the best so far, and the stage outputs that model instead of the last. Batches come from :func:`batch_order` (seeded epochs) and a step's
method rng from ``(seed, step, 17)``, so a resumed run draws what the uninterrupted one did.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from components.engine.base import TokenMeter
from components.methods.base import Group, Method, RolloutContext
from components.progress import step_progress
from components.trainer.task import VALIDATION_SEED, MathTask, Task
from components.trainer.train_config import TrainConfig

__all__ = ["BEST_FILE", "FitLoop", "VALIDATION_SEED", "batch_order", "training_tokens"]

BEST_FILE = "best.json"   # the kept checkpoint: {"step", "val_accuracy"}


def training_tokens(meter: TokenMeter) -> dict[str, int]:
    """What the training rollouts have cost so far: the kept ones (``train_rollout``) plus those
    generated and then dropped (``discarded``: DAPO / PODS drops, verl's padding rows), the
    tokens stage's ``generated_tokens``; validation is not in it. Per-step deltas, the
    cumulative curve and the summary all count this one total, so they add up."""
    kept, dropped = meter.totals("train_rollout"), meter.totals("discarded")
    out = {k: kept[k] + dropped[k] for k in kept}
    out.update(kept_generated_tokens=kept["generated_tokens"], discarded_tokens=dropped["generated_tokens"])
    return out


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


class FitLoop:
    """The loop; a backend sets ``cfg``, ``method``, ``meter`` and ``history`` and
    implements the hooks below that raise ``NotImplementedError``."""

    cfg: TrainConfig
    method: Method
    meter: TokenMeter
    history: list[dict[str, float]]
    best: dict[str, float] | None = None     # keep_best: val: {"step", "val_accuracy"} of the kept checkpoint
    backend_name: str = "embedded"

    # ------------------------------------------------------------------ backend hooks
    def rollout_ctx(self, step: int, seed_base: int) -> RolloutContext:
        raise NotImplementedError

    def update(self, groups: list[Group]) -> dict[str, float]:
        """Advantages, loss and one optimizer step on the groups; stats logged as ``train/<key>``."""
        raise NotImplementedError

    def restore(self) -> tuple[int, dict[str, Any] | None]:
        """Load the latest checkpoint: (first step to run, loop state saved with it or None)."""
        raise NotImplementedError

    def save_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        """Checkpoint after ``step`` with the loop's ``state`` (method, meter, history)."""
        raise NotImplementedError

    def log_metrics(self, row: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def best_dir(self) -> Path:
        """Where the kept (best validation) checkpoint's weights live, in the stage work dir."""
        raise NotImplementedError

    def best_weights(self, dst: Path) -> None:
        """Write the weights of the checkpoint just saved (or just restored) into ``dst``."""
        raise NotImplementedError

    def begin_step(self, step: int) -> None:
        pass

    def after_rollout(self) -> None:
        pass

    def after_update(self) -> None:
        pass

    def extra_metrics(self) -> dict[str, float]:
        return {}

    # ------------------------------------------------------------------ task hooks
    # (the task's; a backend may add to them, as verl adds its clip ratio to the step metrics)
    task: Task = MathTask()

    def training_set(self, items: Sequence[Any], resources: dict[str, Any]) -> list:
        return self.task.training_set(self, items, resources)

    def validation_metrics(self, val_set: list, step: int) -> dict[str, float]:
        return self.task.validation_metrics(self, val_set, step)

    def step_metrics(self, groups: list, before: dict, after: dict) -> dict[str, float]:
        return self.task.step_metrics(groups, before, after)

    # ------------------------------------------------------------------ the loop
    def run_loop(self, problems: Sequence[Any], val_problems: Sequence[Any], resources: dict[str, Any],
                 tokenizer, on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
        c = self.cfg
        train_set = self.training_set(problems, {**resources, "tokenizer": tokenizer})
        val_set = self.task.validation_set(self, val_problems)
        start, state = self.restore()
        if state is not None:
            self.method.load_state_dict(state["method"])
            self.meter.load_state_dict(state["meter"])
            self.history = state["history"]
        self.best = (state or {}).get("best")
        if self.best is not None:
            self._check_best(start)
        if start == 0 and val_set:
            self._log(self.validation_metrics(val_set, -1), step=0)
        with step_progress(f"train {c.method} s{c.seed}", c.steps, start) as bar:
            for step in range(start, c.steps):
                self.begin_step(step)
                t0 = time.monotonic()
                batch = [train_set[i] for i in batch_order(len(train_set), c.seed, step, c.batch_prompts)]
                rng = np.random.default_rng([c.seed, step, 17])
                before = training_tokens(self.meter)
                with self.meter.tagged(step=step):
                    groups = self.method.rollout(batch, self.task.context(self, step, c.seed), rng)
                self.after_rollout()
                t_gen = time.monotonic() - t0
                self.method.observe(groups)
                upd = self.update(groups)
                self.after_update()
                row = self.step_metrics(groups, before, training_tokens(self.meter))
                row.update({f"train/{k}": v for k, v in upd.items()})
                row.update({"time/step_s": time.monotonic() - t0, "time/generate_s": t_gen})
                row.update(self.extra_metrics())
                row.update({f"method/{k}": v for k, v in self.method.step_stats().items()})
                new_best = False
                if val_set and ((step + 1) % c.val_every == 0 or step + 1 == c.steps):
                    val = self.validation_metrics(val_set, step)
                    row.update(val)
                    new_best = c.keep_best == "val" and (self.best is None or
                                                         val["val/accuracy"] > self.best["val_accuracy"])
                    if new_best:
                        self.best = {"step": step + 1, "val_accuracy": float(val["val/accuracy"])}
                self._log(row, step=step + 1)
                if (step + 1) % c.ckpt_every == 0 or step + 1 == c.steps:
                    extra = {"best": self.best} if c.keep_best == "val" else {}
                    self.save_checkpoint(step, {"method": self.method.state_dict(),
                                                "meter": self.meter.state_dict(), "history": self.history, **extra})
                    if new_best:
                        self._keep_best()
                bar.advance(1, info=f"reward {row['reward/mean']:.3f} mixed {row['groups/mixed_frac']:.2f}")
                if on_step is not None:
                    on_step(step)
        return self.summary()

    def _keep_best(self) -> None:
        def fill(d: Path) -> None:
            self.best_weights(d)
            (d / BEST_FILE).write_text(json.dumps(self.best))
        from components.trainer.checkpoint import replace_dir

        replace_dir(self.best_dir(), fill)
        self.log_metrics({"best/step": float(self.best["step"]), "best/val_accuracy": self.best["val_accuracy"]},
                         self.best["step"])

    def _check_best(self, start: int) -> None:
        """The kept weights are those the restored state names; a crash between a best step's
        checkpoint and the copy leaves them one behind, and the checkpoint just restored is that step."""
        f = self.best_dir() / BEST_FILE
        if f.is_file() and json.loads(f.read_text())["step"] == self.best["step"]:
            return
        if self.best["step"] != start:
            raise RuntimeError(f"{self.best_dir()}: the kept checkpoint is not step {self.best['step']}, "
                               "the one the restored state names, and that step's checkpoint is gone")
        self._keep_best()

    def _log(self, row: dict[str, float], step: int) -> None:
        clean = {k: float(v) for k, v in row.items() if v is not None and not math.isnan(float(v))}
        self.log_metrics(clean, step)
        self.history.append({"step": step, **clean})

    # ------------------------------------------------------------------ outputs
    def summary(self) -> dict[str, Any]:
        tot = training_tokens(self.meter)
        last_val = [h["val/accuracy"] for h in self.history if "val/accuracy" in h]
        out = {"method": self.cfg.method, "seed": self.cfg.seed, "steps": self.cfg.steps,
               "generated_tokens": tot["generated_tokens"], "kept_generated_tokens": tot["kept_generated_tokens"],
               "discarded_tokens": tot["discarded_tokens"], "prompt_tokens": tot["prompt_tokens"],
               "rollouts": tot["sequences"], "final_val_accuracy": last_val[-1] if last_val else None,
               "max_new_tokens": self.cfg.max_new_tokens, "adv_estimator": self.cfg.adv_estimator,
               "clip_ratio": None}
        if self.cfg.keep_best == "val":
            out["kept_checkpoint"] = getattr(self, "best", None)
        out.update(self.task.summary(self, tot))
        if self.backend_name != "embedded":
            out["backend"] = self.backend_name
        return out

    def write_records(self, out_dir: Path) -> None:
        """The run's records beside ``model/``: the same files from every backend. Wall-clock
        fields (``time/*``) go to MLflow only: they measure the machine, and in the artifact they
        would make two runs of the same code and seed differ in digest (and so in every
        downstream cache key) although every computed number is identical."""
        with open(out_dir / "metrics.jsonl", "w") as f:
            for h in self.history:
                f.write(json.dumps({k: v for k, v in h.items() if not k.startswith("time/")}) + "\n")
        (out_dir / "tokens.json").write_text(json.dumps(self.meter.to_rows()))
        (out_dir / "method_state.json").write_text(json.dumps(self.method.state_dict()))
        (out_dir / "summary.json").write_text(json.dumps(self.summary(), indent=2))
        if self.cfg.keep_best == "val":
            (out_dir / BEST_FILE).write_text(json.dumps(self.best))

    def output_model_dir(self) -> Path | None:
        """The weights the stage outputs as ``model/`` when they are not the last ones: the
        kept checkpoint's (``keep_best: val``), None for the last."""
        if self.cfg.keep_best != "val":
            return None
        if self.best is None:
            raise RuntimeError("keep_best: val, but no validation of a trained policy ran")
        return self.best_dir()
