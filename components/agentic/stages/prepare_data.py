"""prepare_data (agentic): the environment and its map seeds.

Writes ``env.json`` (environment name + config, read by every later stage) and ``seeds.json``:
``pretrain`` seeds (behaviour-cloning demonstrations), the ``train_pool`` (what filter_hard
filters) and ``heldout``: the fixed evaluation map seeds (128, the paper's protocol). The three
ranges are disjoint by construction (offsets 1e6 and 2e6).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from components.stages.base import StageContext, StageParams

NAME = "prepare_data"
VERSION = 1
INPUTS = ()
PRETRAIN_OFFSET, HELDOUT_OFFSET = 1_000_000, 2_000_000


class Params(StageParams):
    task: Literal["agentic"] = "agentic"
    env: str = "sokoban"
    env_config: dict[str, Any] = Field(default_factory=dict)
    pretrain_seeds: int = Field(400, ge=1)
    train_pool: int = Field(256, ge=1)
    heldout: int = Field(128, ge=1)


def run(params: Params, ctx: StageContext) -> dict:
    from components.agentic.stages.common import env_factory, env_spec, write_env
    from components.stages.common import write_json

    spec = env_spec(params.env, params.env_config)
    make = env_factory(spec)
    seeds = {"pretrain": [PRETRAIN_OFFSET + i for i in range(params.pretrain_seeds)],
             "train_pool": list(range(params.train_pool)),
             "heldout": [HELDOUT_OFFSET + i for i in range(params.heldout)]}
    env = make()
    first = env.reset(seeds["train_pool"][0])    # the generator/level set works at all
    write_env(ctx.out_dir, spec)
    write_json(ctx.out_dir / "seeds.json", seeds)
    return {"env": params.env, **{k: len(v) for k, v in seeds.items()}, "first_prompt_chars": len(first)}
