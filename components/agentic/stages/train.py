"""train (agentic): one episodic training run (one method, one seed) with GiGPO advantages.

Inputs as the math train stage: ``model`` (base policy), ``hard`` (kept map seeds, held-out
seeds, the environment), ``prefixes`` (expert episodes; empty unless asked for). Outputs as
the math train stage (``model/``, ``metrics.jsonl``, ``tokens.json``, ``summary.json``), so
``tokens`` and ``tables`` read them unchanged. ``backend: verl`` is the scale-out path
(``components/agentic/verl_loop.py``); it needs GPUs and is refused here with a message.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from components.agentic.config import EpisodeTrainConfig
from components.stages.base import StageContext

NAME = "train"
VERSION = 1
INPUTS = ("model", "hard", "prefixes")


class Params(EpisodeTrainConfig):
    backend: Literal["embedded", "verl"] = "embedded"
    threads: int | None = None
    max_prompt_length: int = Field(512, ge=1, description="longest prompt (tokens) a turn may have")
    verl_overrides: tuple[str, ...] = ()


def run(params: Params, ctx: StageContext) -> dict:
    if params.backend == "verl":
        from components.agentic.verl_loop import train_agentic_with_verl

        return train_agentic_with_verl(params, ctx)
    from components.agentic.stages.common import env_factory, read_env
    from components.agentic.trainer import EpisodeTrainer
    from components.stages.common import load_model, read_json, set_threads

    set_threads(params.threads)
    model, tok = load_model(ctx.input("model"))
    make = env_factory(read_env(ctx.input("hard")))
    kept = read_json(ctx.input("hard") / "train.json")
    heldout = [r["seed"] for r in read_json(ctx.input("hard") / "heldout.json")]
    traces = read_json(ctx.input("prefixes") / "traces.json")
    cfg = EpisodeTrainConfig(**params.model_dump(include=set(EpisodeTrainConfig.model_fields)))
    trainer = EpisodeTrainer(cfg, model, tok, make, ctx.tracker, max_prompt_length=params.max_prompt_length)
    summary = trainer.fit([r["seed"] for r in kept], heldout,
                          {"p0": {r["seed"]: r["base_pass_rate"] for r in kept if r["base_pass_rate"] is not None},
                           "expert_traces": traces},
                          ctx.work_dir)
    trainer.save_outputs(ctx.out_dir)
    return summary
