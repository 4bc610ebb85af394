"""train (agentic): one episodic training run (one method, one seed) with GiGPO advantages.

Inputs as the math train stage: ``model`` (base policy), ``hard`` (kept map seeds, held-out
seeds, the environment), ``prefixes`` (expert episodes; empty unless asked for). Outputs as
the math train stage (``model/``, ``metrics.jsonl``, ``tokens.json``, ``summary.json``), so
``tokens`` and ``tables`` read them unchanged. ``backend: verl`` runs the same methods on verl
(``components/trainer/verl``: Ray, verl's FSDP actor, vLLM servers driven by the
multi-turn ``EpisodeAgentLoop``; on a machine without a GPU verl's CPU platform, as the math
verl backend).
"""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from components.agentic.episode_train_config import EpisodeTrainConfig
from components.stages.base import StageContext

NAME = "train"
VERSION = 1
INPUTS = ("model", "hard", "prefixes")


class Params(EpisodeTrainConfig):
    # verl-only fields added later: left out of the dump (and the cache key) at their default
    ADDED_FIELDS: ClassVar[tuple[str, ...]] = ("layout", "max_episode_tokens", "n_gpus_per_node", "nnodes",
                                               "rollout_tp", "gpu_memory_utilization")
    backend: Literal["embedded", "verl"] = "embedded"
    threads: int | None = None
    max_prompt_length: int = Field(512, ge=1, description="longest prompt (tokens) a turn may have")
    verl_overrides: tuple[str, ...] = ()
    # verl backend only. layout: turns = one training row per turn (the environment's prompt as
    # context, as embedded); serialized = one row per episode, observations masked in the response
    layout: Literal["turns", "serialized"] = "turns"
    max_episode_tokens: int = Field(4096, ge=1, description="serialized layout: response budget of an episode")
    n_gpus_per_node: int = Field(1, ge=1)
    nnodes: int = Field(1, ge=1)
    rollout_tp: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)


def run(params: Params, ctx: StageContext) -> dict:
    if params.backend == "verl":
        from components.trainer.verl.run import train_with_verl

        return train_with_verl(params, ctx)
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
