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
  ``components.agentic.data_stages.EpisodeStages``): the item pools, the filter score and the
  evaluation samples.

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

    # ------------------------------------------------------------------ the pretrain stage's part
    @staticmethod
    def pretrain(params, ctx) -> dict:
        """Train the tiny base policy from scratch into ``ctx.out_dir / "model"`` and write
        ``base_rates.json``; the stage's summary."""
        raise NotImplementedError

    @staticmethod
    def seed_prefixes(params, ctx) -> dict:
        """The expert traces of the training items into ``traces.json``; the stage's summary."""
        raise NotImplementedError


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

    @staticmethod
    def seed_prefixes(params, ctx) -> dict:
        """One verified expert trace per hard prompt: ``sft.jsonl``, ``traces.json`` and the
        expert prefix states at ``cut_fractions`` (``prefix_pool.jsonl``)."""
        import json
        from dataclasses import replace

        from components.data.schema import read_problems, write_problems
        from components.stages.common import grade_fn, write_json

        hard = read_problems(ctx.input("hard") / "train.jsonl")
        grade = grade_fn(params.grading_timeout_s)
        try:
            cands = [(p, t) for p in hard for t in p.traces]
            scores = grade([t for _, t in cands], [p.answer for p, _ in cands]) if cands else []
        finally:
            grade.grader.close()
        chosen: dict[str, list[str]] = {}
        rejected = 0
        for (p, t), (s, _) in zip(cands, scores):
            if s > 0.5 and len(chosen.setdefault(p.uid, [])) < params.traces_per_prompt:
                chosen[p.uid].append(t)
            elif s <= 0.5:
                rejected += 1
        sft = [replace(p, traces=tuple(chosen[p.uid])) for p in hard if chosen.get(p.uid)]
        write_problems(ctx.out_dir / "sft.jsonl", sft)
        write_json(ctx.out_dir / "traces.json", {p.uid: p.traces[0] for p in sft})
        with open(ctx.out_dir / "prefix_pool.jsonl", "w") as f:
            for p in sft:
                trace = p.traces[0]
                for frac in params.cut_fractions:
                    cut = int(round(frac * len(trace)))
                    f.write(json.dumps({"uid": p.uid, "alpha": frac, "prefix": trace[:cut]}) + "\n")
        # trace lengths, to check against the sweep's response budget (for the character tokenizer
        # of the embedded demo a character is a token; the policy also samples an EOS)
        lengths = sorted(len(p.traces[0]) for p in sft)
        summary = {"hard_prompts": len(hard), "seeded_prompts": len(sft), "rejected_traces": rejected,
                   "no_trace": len(hard) - len(sft),
                   "trace_chars_median": lengths[len(lengths) // 2] if lengths else 0,
                   "trace_chars_max": lengths[-1] if lengths else 0}
        ctx.tracker.log_metrics({k: float(v) for k, v in summary.items()})
        if not sft:
            raise ValueError(f"seed_prefixes: none of the {len(hard)} hard prompts has a verified expert trace")
        return summary

    @staticmethod
    def pretrain(params, ctx) -> dict:
        """On the expert traces of the easy problems; then the base pass rate per level at
        temperature 1 on prepare_data's probe set (never trained on)."""
        from components.data.schema import read_problems
        from components.engine.base import Request, SamplingParams, TokenMeter
        from components.policy.model import TinyPolicyConfig, build_policy, save_policy
        from components.policy.pretraining import pretrain_policy
        from components.policy.tokenizer import build_tokenizer
        from components.stages.common import grade_fn, make_engine, write_json

        problems = read_problems(ctx.input("data") / "pretrain.jsonl")
        tok = build_tokenizer()
        model = build_policy(TinyPolicyConfig(**params.policy.model_dump()), tok, seed=params.seed)
        info = pretrain_policy(model, tok, problems, steps=params.steps, batch_size=params.batch_size,
                               lr=params.lr, warmup=params.warmup, seed=params.seed,
                               log_fn=lambda s, m: ctx.tracker.log_metrics({f"pretrain/{k}": v for k, v in m.items()},
                                                                           s))
        save_policy(model, tok, ctx.out_dir / "model")
        rates, clipped, sampled = {}, 0, 0
        probe_file = ctx.input("data") / "probe.jsonl"
        probes = read_problems(probe_file) if probe_file.is_file() else []
        if probes:
            meter = TokenMeter(stage="pretrain")
            engine, grade = make_engine(model, tok, meter), grade_fn()
            for lv in sorted({p.level for p in probes}):
                probe = [p for p in probes if p.level == lv]
                reqs = [Request(tuple(tok.encode(p.prompt, add_special_tokens=False)), n=4) for p in probe]
                outs = engine.generate(reqs, SamplingParams(1.0, 1.0, params.max_new_tokens, seed=params.seed),
                                       purpose="probe")
                scores = grade([c.text for o in outs for c in o], [p.answer for p, o in zip(probe, outs) for _ in o])
                rates[str(lv)] = float(np.mean([s for s, _ in scores]))
                clipped += sum(c.finish_reason == "length" for o in outs for c in o)
                sampled += sum(len(o) for o in outs)
            grade.grader.close()
            ctx.tracker.log_metrics({f"base_pass_rate/level_{k}": v for k, v in rates.items()})
        # share of probe responses cut off by the response budget (verl: response_length/clip_ratio)
        clip = clipped / sampled if sampled else None
        if clip is not None:
            ctx.tracker.log_metrics({"probe/clip_ratio": clip})
        write_json(ctx.out_dir / "base_rates.json", rates)
        return {**{k: v for k, v in info.items() if isinstance(v, (int, float))}, "base_pass_rate": rates,
                "probe_clip_ratio": clip}

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
