"""train: one training run (one method, one seed), on every task.

Inputs: ``model`` (the base policy), ``hard`` (the training items + held-out set for
validation: prompts, or map seeds and the environment), ``prefixes`` (expert traces: VSR's
cold-start seeds and the SFT set), ``teacher`` (optional: the teacher model of a distilling
method, PG-OPD, named by the sweep). The task (``task``, ``components.trainer.task``) reads
its items from them (``Task.from_stage``); the one embedded trainer trains on them.
Checkpoints live in the stage's work dir, so a killed or retried task resumes from its last
checkpoint. ``backend: verl`` runs the same params on verl (Ray, GPU workers, vLLM rollouts;
``components/trainer/verl``, on episodes with the multi-turn ``EpisodeAgentLoop``), imported only then.
"""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from components.error_text import FieldError
from components.stages.base import Device, StageContext
from components.trainer.train_config import TrainConfig, train_config_of

NAME = "train"
VERSION = 2
TASKS = ("math", "agentic")
INPUTS = ("model", "hard", "prefixes", "teacher*")   # teacher: optional (PG-OPD's teacher model)


class Params(TrainConfig):
    # ``backend`` was in the dump (default "embedded") since VERSION 1, so widening its type
    # keeps every key; the fields below were added later: left out of the dump at default.
    ADDED_FIELDS = TrainConfig.ADDED_FIELDS + ("n_gpus_per_node", "nnodes", "rollout_tp", "gpu_memory_utilization",
                                               "max_prompt_length", "verl_overrides", "gpu_memory_gib", "layout",
                                               "max_episode_tokens", "device")
    ONLY: ClassVar[dict[str, str]] = {**TrainConfig.ONLY, "layout": "agentic", "max_episode_tokens": "agentic"}
    backend: Literal["embedded", "verl"] = "embedded"
    threads: int | None = None
    # the embedded trainer's device, float32 there (the update's log-ratios and the rollouts read
    # the same weights); the trainer works on whatever device its model is on
    device: Device = "cpu"
    # verl backend only: resources and raw verl overrides (Hydra ``key=value``, applied last)
    n_gpus_per_node: int = Field(1, ge=1)
    nnodes: int = Field(1, ge=1)
    rollout_tp: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)
    max_prompt_length: int = Field(512, ge=1, description="longest prompt (tokens): a math prompt, a turn's prompt")
    verl_overrides: tuple[str, ...] = ()
    # memory of one GPU, for the sweep's per-cell fit check (components/trainer/verl/memory.py)
    gpu_memory_gib: float = Field(80.0, gt=0)
    # agentic on verl. layout: turns = one training row per turn (the environment's prompt as
    # context, as embedded); serialized = one row per episode, observations masked in the response
    layout: Literal["turns", "serialized"] = "turns"
    max_episode_tokens: int = Field(4096, ge=1, description="serialized layout: response budget of an episode")

    @model_validator(mode="after")
    def _device_is_embedded(self):
        if self.backend == "verl" and self.device != "cpu":
            raise FieldError("device", f"{self.device!r} is the embedded trainer's; verl places its workers "
                                       "by n_gpus_per_node / nnodes")
        return self


def run(params: Params, ctx: StageContext) -> dict:
    if params.backend == "verl":
        from components.trainer.verl.run import train_with_verl

        return train_with_verl(params, ctx)
    from components.stages.common import load_model, set_threads
    from components.trainer.embedded import EmbeddedTrainer
    from components.trainer.task import task_class

    set_threads(params.threads)
    model, tok = load_model(ctx.input("model"), params.device, "float32")
    task, items, val, resources = task_class(params.task).from_stage(params, ctx, tok)
    try:
        trainer = EmbeddedTrainer(train_config_of(params), model, tok, task, ctx.tracker)
        summary = trainer.fit(items, val, resources, ctx.work_dir)
    finally:
        task.close()
    trainer.save_outputs(ctx.out_dir)
    if params.device != "cpu":
        summary = {**summary, "device": str(next(model.parameters()).device)}
    return summary
