"""The episodic task: map seeds of an environment, multi-turn episodes, success rates.

A ``components.trainer.task.Task`` for the one fit loop and the one embedded trainer:

* the items are map seeds; a start state is a map seed with a replayed turn prefix
  (:class:`~components.agentic.rollout.Start`); the method (the same registry and classes as
  on math) picks start states through an :class:`~components.agentic.rollout.EpisodeContext`,
  whose ``play`` (the backend's) generates their episodes turn by turn;
* every generated turn is one loss row (:func:`turn_rows`): its prompt (instruction, history,
  observation) on the context side and its reply on the response side, so only reply (action)
  tokens are in the loss; its advantage is GiGPO's (``components.algos.gigpo``, or its episode
  part). Replayed prefix turns have no row;
* validation is the success rate on held-out map seeds (one episode each); the step's metrics
  are episode statistics (success, return, turns, invalid replies).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from components.agentic.data_stages import EpisodeStages
from components.agentic.rollout import (EpisodeContext, EpisodeGroup, EpisodeRun, Start, episode_runs,
                                        prompt_encoder, rollout_episodes, success_rate, to_gigpo_episodes)
from components.algos.advantages import adv_estimator
from components.engine.base import SamplingParams
from components.methods.base import Group
from components.trainer.loop import FitLoop
from components.trainer.task import VALIDATION_SEED, Task, token_deltas

__all__ = ["EpisodeTask", "EpisodeLoop", "turn_rows", "success_rate"]


def turn_rows(runs: Sequence[EpisodeRun], cfg) -> list[Group]:
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


class EpisodeTask(EpisodeStages, Task):
    """Episodes of ``make_env()``; a turn's prompt above ``max_prompt_length`` tokens raises."""
    name = "agentic"

    def __init__(self, make_env: Callable | None = None, max_prompt_length: int | None = None,
                 env: dict[str, Any] | None = None):
        super().__init__(make_env, env)
        self.max_prompt_length = max_prompt_length

    def play(self, loop, starts: Sequence[Start], seed: int, purpose: str) -> list[EpisodeRun]:
        """Every start's episodes on the loop's engine (the embedded backend's ``play``)."""
        c = loop.cfg
        return rollout_episodes(loop.engine, self.make_env, starts,
                                SamplingParams(c.temperature, c.top_p, c.max_new_tokens, seed), purpose,
                                encode=prompt_encoder(loop.tok, c.prompt_template),
                                max_prompt_len=self.max_prompt_length)

    @classmethod
    def from_stage(cls, params, ctx, tokenizer) -> tuple["EpisodeTask", list[int], list[int], dict[str, Any]]:
        from components.envs.spec import env_factory, read_env
        from components.stages.common import read_json

        kept = read_json(ctx.input("hard") / "train.json")
        heldout = [r["seed"] for r in read_json(ctx.input("hard") / "heldout.json")]
        resources = {"p0": {r["seed"]: r["base_pass_rate"] for r in kept if r["base_pass_rate"] is not None},
                     "expert_traces": read_json(ctx.input("prefixes") / "traces.json")}
        task = cls(env_factory(read_env(ctx.input("hard"))), params.max_prompt_length)
        return task, [r["seed"] for r in kept], heldout, resources

    def context(self, loop, step: int, seed: int) -> EpisodeContext:
        return EpisodeContext(loop.play, seed * 1_000_003 + 101 * step, step)

    def loss_rows(self, groups: list[EpisodeGroup], cfg) -> tuple[list[Group], list[float]]:
        rows = turn_rows(episode_runs(groups), cfg)
        return rows, [g.meta["advantages"][0] for g in rows]

    def validation_metrics(self, loop, seeds: list[int], step: int) -> dict[str, float]:
        """Success rate of one episode per held-out map seed, the same sampling seeds every time."""
        with loop.meter.tagged(step=step):
            runs = loop.play([Start(int(s), (), f"val{s}", 1) for s in seeds], VALIDATION_SEED + loop.cfg.seed,
                             purpose="validation")
        return {"val/accuracy": success_rate(runs)}

    def step_metrics(self, groups: list[EpisodeGroup], before: dict, after: dict) -> dict[str, float]:
        runs = episode_runs(groups)
        fresh = [r for r in runs if not r.start.prefix]
        replay = [r for r in runs if r.start.prefix]
        by_start: dict[str, list[bool]] = {}
        for r in runs:
            by_start.setdefault(r.start.group_id(), []).append(r.won)
        turns = [t for r in runs for t in r.turns]
        return {
            "reward/mean": success_rate(runs),          # success rate (the tables' training curve)
            "reward/fresh_mean": success_rate(fresh),
            "reward/replay_mean": success_rate(replay) if replay else math.nan,
            "episode/return_mean": float(np.mean([r.episode_return for r in runs])),
            "episode/new_turns_mean": float(np.mean([len(r.turns) for r in runs])),
            "episode/invalid_frac": float(np.mean([not t.valid for t in turns])) if turns else math.nan,
            "groups/mixed_frac": float(np.mean([len(set(v)) > 1 for v in by_start.values()])),
            "groups/replay_frac": float(np.mean([bool(r.start.prefix) for r in runs])),
            **token_deltas(before, after),
            "rollouts": float(len(runs)),
        }

    def summary(self, loop, tokens: dict[str, int]) -> dict[str, Any]:
        return {"rollouts": int(sum(h.get("rollouts", 0) for h in loop.history)), "task": "agentic",
                "generated_turns": loop.meter.totals("train_rollout")["sequences"]}


class EpisodeLoop(FitLoop):
    """The loop on episodes, for a backend that implements ``play`` itself (verl's servers)."""
    task = EpisodeTask()

    def play(self, starts: Sequence[Start], seed: int, purpose: str = "train_rollout") -> list[EpisodeRun]:
        """Every start's episodes, played to the end with sampling seed ``seed``."""
        raise NotImplementedError
