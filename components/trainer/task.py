"""The task plug-in: what differs between math and episodes, and nothing else.

The fit loop (``components.trainer.loop``), the trainers, the methods and the stages are
written once; a :class:`Task` supplies

* the items: problems, or map seeds of an environment (``training_set`` / ``validation_set``);
* the rollout context a method works through (``context``): how a start state is encoded (a
  prompt, a prompt with a replayed token prefix, a map seed with a replayed turn prefix:
  ``prompt_items`` / ``replay_item``), how a group is rolled out from it and graded
  (``sample_groups``: a reward per sample, success for an episode);
* the rows that enter the loss and their advantages (``loss_rows``: a math group is its own
  rows, advantages from the outcome estimator; an episode gives one row per generated turn,
  advantages from GiGPO);
* the step's metrics, the validation metric and the summary fields;
* the data stages' part, inherited (``components.data.task_stages.ProblemStages``,
  ``components.agentic.data_stages.EpisodeStages``): the item pools, the base policy, the filter
  score, the expert traces and the evaluation samples.

The two tasks are :class:`MathTask` (here) and ``components.agentic.task.EpisodeTask``
(``TASKS``; ``TrainConfig.task`` names one); ``from_stage`` reads a task's items from the
``train`` stage's inputs. A hook takes the loop, for the
backend's parts (its engine, its ``rollout_ctx`` / ``play``, its meter and config).
"""
from __future__ import annotations

import dataclasses

from typing import Any, ClassVar, Sequence

import numpy as np

from components.data.task_stages import ProblemStages
from components.methods.base import Group, RolloutContext

# validation samples are drawn with this offset on the run's seed, the same at every step
VALIDATION_SEED = 7_919


class Task:
    name: ClassVar[str]

    def training_set(self, loop, items: Sequence[Any], resources: dict[str, Any]) -> list:
        """Set the method up; the items the step batches are drawn from."""
        loop.method.setup(items, resources)
        train_set = loop.method.training_problems(items)
        if not train_set:
            raise ValueError(f"{loop.cfg.method}: no training items ({self.name})")
        return train_set

    def validation_set(self, loop, items: Sequence[Any]) -> list:
        return list(items)[: loop.cfg.val_size]

    def context(self, loop, step: int, seed: int):
        """What a method rolls out through at ``step``: encodes start states, samples and grades groups."""
        raise NotImplementedError

    def loss_rows(self, groups: list, cfg) -> tuple[list[Group], list[float] | None]:
        """The rows of the loss and their advantages (None: the config's outcome estimator's)."""
        raise NotImplementedError

    def validation_metrics(self, loop, items: list, step: int) -> dict[str, float]:
        raise NotImplementedError

    def step_metrics(self, groups: list, before: dict, after: dict) -> dict[str, float]:
        raise NotImplementedError

    def summary(self, loop, tokens: dict[str, int]) -> dict[str, Any]:
        """The task's fields of the run's summary (over the loop's shared ones); ``tokens``
        is the loop's ``training_tokens``."""
        return {}

    # ------------------------------------------------------------------ the train stage's part
    @classmethod
    def from_stage(cls, params, ctx, tokenizer) -> tuple["Task", list, list, dict[str, Any]]:
        """The task, training items, held-out items and method resources from the ``train``
        stage's inputs (``hard``, ``prefixes``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the task holds (the grader's worker processes)."""


class MathTask(ProblemStages, Task):
    """Prompts graded by ``grade`` (math-verify or a rule); the backend's ``rollout_ctx``
    generates. ``grade`` may be None where the backend grades (verl's reward workers)."""
    name = "math"

    def context(self, loop, step: int, seed: int) -> RolloutContext:
        return loop.rollout_ctx(step, seed)

    @classmethod
    def from_stage(cls, params, ctx, tokenizer) -> tuple["MathTask", list, list, dict[str, Any]]:
        from components.data.schema import read_problems
        from components.stages.common import grade_fn, read_json

        problems = read_problems(ctx.input("hard") / "train.jsonl")
        val = read_problems(ctx.input("hard") / "heldout.jsonl")
        check_prompt_budget(problems, tokenizer, params)
        resources = {"expert_traces": read_json(ctx.input("prefixes") / "traces.json"),
                     "p0": {p.uid: p.meta.get("base_pass_rate", 0.0) for p in problems}}
        if "teacher" in ctx.inputs:          # a distilling method's teacher model (PG-OPD)
            resources["teacher"] = ctx.input("teacher")
        return cls(grade_fn(params.grading_timeout_s)), problems, val, resources

    def loss_rows(self, groups: list[Group], cfg) -> tuple[list[Group], None]:
        return groups, None

    def validation_metrics(self, loop, items: list, step: int) -> dict[str, float]:
        """Mean reward and the share of responses cut at the budget, of ``val_samples``
        samples per held-out prompt drawn with the same seeds at every step (at ``val_temperature``
        / ``val_top_p`` where set)."""
        if not items:
            return {"val/accuracy": float("nan"), "val/clip_ratio": float("nan")}
        c = loop.cfg
        ctx = loop.rollout_ctx(0, VALIDATION_SEED + c.seed)
        ctx.sampling = dataclasses.replace(
            ctx.sampling, temperature=ctx.sampling.temperature if c.val_temperature is None else c.val_temperature,
            top_p=ctx.sampling.top_p if c.val_top_p is None else c.val_top_p)
        with loop.meter.tagged(step=step):
            groups = ctx.sample_groups(ctx.prompt_items(items), loop.cfg.val_samples, purpose="validation")
        clip = float(np.mean([f == "length" for g in groups for f in g.finish_reasons]))
        return {"val/accuracy": float(np.mean([r for g in groups for r in g.rewards])), "val/clip_ratio": clip}

    def step_metrics(self, groups: list[Group], before: dict, after: dict) -> dict[str, float]:
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
            **token_deltas(before, after),
            "rollouts": float(after["sequences"] - before["sequences"]),
        }

    def summary(self, loop, tokens: dict[str, int]) -> dict[str, Any]:
        clip = [h["response_length/clip_ratio"] for h in loop.history if "response_length/clip_ratio" in h]
        return {"rollouts": tokens["sequences"], "clip_ratio": float(np.mean(clip)) if clip else None}


def token_deltas(before: dict, after: dict) -> dict[str, float]:
    """The step's token counts from the meter's totals before and after it."""
    return {"tokens/generated": float(after["generated_tokens"] - before["generated_tokens"]),
            "tokens/prompt": float(after["prompt_tokens"] - before["prompt_tokens"]),
            "tokens/discarded": float(after["discarded_tokens"] - before["discarded_tokens"]),
            "tokens/generated_cum": float(after["generated_tokens"])}


def check_prompt_budget(problems, tok, params) -> None:
    """The sweep's prompt budget (``max_prompt_length``) holds for every training prompt."""
    from components.data.prompting import encode_prompt

    for p in problems:
        n = len(encode_prompt(p, tok, params.prompt_template))
        if n > params.max_prompt_length:
            raise ValueError(f"train: prompt {p.uid} has {n} tokens, above max_prompt_length "
                             f"{params.max_prompt_length} (the sweep's max_prompt_tokens)")


# name -> "module:Class": the tasks a config's ``task`` may name (imported when used)
TASKS = {"math": "components.trainer.task:MathTask", "agentic": "components.agentic.task:EpisodeTask"}


def task_class(name: str) -> type[Task]:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r} (known: {', '.join(TASKS)})")
    import importlib

    mod, _, attr = TASKS[name].partition(":")
    return getattr(importlib.import_module(mod), attr)
