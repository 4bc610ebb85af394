"""filter_hard (agentic): keep the train-pool map seeds the base policy rarely solves.

``k`` episodes per seed at the base policy's sampling settings; a seed is kept with at most
``c`` successes (and at least ``min_successes``: 0 keeps the paper's hard regime; 1 keeps
seeds the policy can solve at all, where learning from its own successes can start). The
held-out seeds are not filtered: evaluation is on the fixed held-out map seeds (the paper's
protocol). Every generated token is metered with purpose ``filter``.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Literal

from pydantic import Field, model_validator

from components.stages.base import StageContext, StageParams

NAME = "filter_hard"
VERSION = 1
INPUTS = ("data", "model")


class Params(StageParams):
    task: Literal["agentic"] = "agentic"
    k: int = Field(8, ge=1)
    c: int = Field(1, ge=0)
    min_successes: int = Field(0, ge=0)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(8, ge=1)
    max_prompts: int = Field(64, ge=1, description="cap on kept training map seeds")
    seed: int = 0
    threads: int | None = None
    engine: Literal["hf", "vllm"] = "hf"      # vllm: on a GPU, in the trainer image
    # every train-pool seed, no sampling (the paper trains on its environments' map seeds as they come)
    keep_all: bool = False
    prompt_template: Literal["raw", "chat"] = "raw"

    @model_validator(mode="after")
    def _band(self):
        if self.c >= self.k:
            raise ValueError(f"c: {self.c} must be < k ({self.k}): otherwise every map seed is 'hard'")
        if self.min_successes > self.c:
            raise ValueError(f"min_successes: {self.min_successes} is above c ({self.c}): nothing can be kept")
        return self


def run(params: Params, ctx: StageContext) -> dict:
    from components.agentic.rollout import Start, prompt_encoder, rollout_episodes
    from components.agentic.stages.common import env_factory, read_env, write_env
    from components.engine.base import SamplingParams, TokenMeter
    from components.stages.common import open_engine, read_json, set_threads, write_json

    set_threads(params.threads)
    spec = read_env(ctx.input("data"))
    make = env_factory(spec)
    seeds = read_json(ctx.input("data") / "seeds.json")
    if params.keep_all:
        kept = [{"seed": s, "base_successes": None, "base_samples": 0, "base_pass_rate": None}
                for s in seeds["train_pool"]][: params.max_prompts]
        write_env(ctx.out_dir, spec)
        write_json(ctx.out_dir / "train.json", kept)
        write_json(ctx.out_dir / "heldout.json", [{"seed": s} for s in seeds["heldout"]])
        write_json(ctx.out_dir / "stats.json", {"kept": len(kept), "keep_all": True})
        (ctx.out_dir / "tokens.json").write_text("[]")
        return {"kept_train": len(kept), "kept_heldout": len(seeds["heldout"]), "filter_generated_tokens": 0}
    meter = TokenMeter(stage="filter_hard")
    engine, tok = open_engine(ctx.input("model"), meter, params.engine)
    pool = seeds["train_pool"]
    runs = rollout_episodes(engine, make, [Start(s, (), str(s), params.k) for s in pool],
                            SamplingParams(params.temperature, params.top_p, params.max_new_tokens, params.seed),
                            purpose="filter", encode=prompt_encoder(tok, params.prompt_template))
    wins = Counter()
    for r in runs:
        wins[r.start.seed] += r.won
    kept = [{"seed": s, "base_successes": wins[s], "base_samples": params.k, "base_pass_rate": wins[s] / params.k}
            for s in pool if params.min_successes <= wins[s] <= params.c][: params.max_prompts]
    write_env(ctx.out_dir, spec)
    write_json(ctx.out_dir / "train.json", kept)
    write_json(ctx.out_dir / "heldout.json", [{"seed": s} for s in seeds["heldout"]])
    hist = dict(sorted(Counter(wins[s] for s in pool).items()))
    tokens = meter.totals("filter")
    write_json(ctx.out_dir / "stats.json", {"kept": len(kept), "pool": len(pool), "successes_histogram": hist,
                                            "k": params.k, "c": params.c, "tokens": tokens,
                                            "pool_success": sum(wins.values()) / (len(pool) * params.k)})
    (ctx.out_dir / "tokens.json").write_text(json.dumps(meter.to_rows()))
    ctx.tracker.log_metrics({"train/kept": len(kept), "train/pool": len(pool),
                             "train/pool_success": sum(wins.values()) / (len(pool) * params.k)})
    if not kept:
        raise ValueError(f"filter_hard: no map seed has {params.min_successes}..{params.c} successes in "
                         f"{params.k} episodes (histogram {hist}); change c/min_successes or the environment")
    return {"kept_train": len(kept), "kept_heldout": len(seeds["heldout"]),
            "filter_generated_tokens": tokens["generated_tokens"], "successes_histogram": {str(k): v for k, v in hist.items()}}
