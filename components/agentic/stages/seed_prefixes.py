"""seed_prefixes (agentic): the expert cold start, empty by default.

The paper's agentic runs use no expert trajectories: the VSR buffer fills with the policy's own
successes only. With ``expert_episodes: true`` this writes the environment expert's episode
(action texts) for each kept map seed, for a cold start by choice (``traces.json``, seed ->
actions; the episodic VSR inserts them when its ``expert_seed`` is on).
"""
from __future__ import annotations

from typing import Literal

from components.stages.base import StageContext, StageParams

NAME = "seed_prefixes"
VERSION = 1
INPUTS = ("hard",)


class Params(StageParams):
    task: Literal["agentic"] = "agentic"
    expert_episodes: bool = False


def run(params: Params, ctx: StageContext) -> dict:
    from components.agentic.bc import expert_action
    from components.agentic.stages.common import env_factory, read_env
    from components.stages.common import read_json, write_json

    traces = {}
    if params.expert_episodes:
        make = env_factory(read_env(ctx.input("hard")))
        for row in read_json(ctx.input("hard") / "train.json"):
            env, actions, done, info = make(), [], False, {"won": False}
            env.reset(row["seed"])
            while not done and (a := expert_action(env)) is not None:
                actions.append(a)
                _, _, done, info = env.step(a)
            if info["won"]:
                traces[str(row["seed"])] = actions
    write_json(ctx.out_dir / "traces.json", traces)
    return {"expert_episodes": len(traces)}
