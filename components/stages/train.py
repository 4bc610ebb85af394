"""train: one training run (one method, one seed) with the embedded trainer.

Inputs: ``model`` (the base policy), ``hard`` (training prompts + held-out set for
validation), ``prefixes`` (expert traces: VSR's cold-start seeds and the SFT set), ``teacher``
(optional: the teacher model of a distilling method, PG-OPD, named by the sweep).
Checkpoints live in the stage's work dir, so a killed or retried task resumes from its
last checkpoint. ``backend: verl`` runs the same params on verl (Ray, GPU workers, vLLM
rollouts; ``components/trainer/verl``), imported only then.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from components.stages.base import StageContext
from components.trainer.train_config import TrainConfig, train_config_of

NAME = "train"
VERSION = 2
INPUTS = ("model", "hard", "prefixes", "teacher*")   # teacher: optional (PG-OPD's teacher model)


class Params(TrainConfig):
    # ``backend`` was in the dump (default "embedded") since VERSION 1, so widening its type
    # keeps every key; the verl-only fields below are new: left out of the dump at default.
    ADDED_FIELDS = TrainConfig.ADDED_FIELDS + ("n_gpus_per_node", "nnodes", "rollout_tp", "gpu_memory_utilization",
                                               "max_prompt_length", "verl_overrides", "gpu_memory_gib")
    backend: Literal["embedded", "verl"] = "embedded"
    threads: int | None = None
    # verl backend only: resources and raw verl overrides (Hydra ``key=value``, applied last)
    n_gpus_per_node: int = Field(1, ge=1)
    nnodes: int = Field(1, ge=1)
    rollout_tp: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)
    max_prompt_length: int = Field(512, ge=1)
    verl_overrides: tuple[str, ...] = ()
    # memory of one GPU, for the sweep's per-cell fit check (components/trainer/verl/memory.py)
    gpu_memory_gib: float = Field(80.0, gt=0)


def run(params: Params, ctx: StageContext) -> dict:
    if params.backend == "verl":
        from components.trainer.verl.run import train_with_verl

        return train_with_verl(params, ctx)
    from components.data.schema import read_problems
    from components.stages.common import grade_fn, load_model, read_json, set_threads
    from components.trainer.embedded import EmbeddedTrainer

    set_threads(params.threads)
    model, tok = load_model(ctx.input("model"))
    hard_dir = ctx.input("hard")
    problems = read_problems(hard_dir / "train.jsonl")
    val = read_problems(hard_dir / "heldout.jsonl")
    traces = read_json(ctx.input("prefixes") / "traces.json")
    _check_prompt_budget(problems, tok, params)
    p0 = {p.uid: p.meta.get("base_pass_rate", 0.0) for p in problems}
    cfg = train_config_of(params)
    grade = grade_fn(params.grading_timeout_s)
    try:
        trainer = EmbeddedTrainer(cfg, model, tok, grade, ctx.tracker)
        teacher = {"teacher": ctx.input("teacher")} if "teacher" in ctx.inputs else {}
        summary = trainer.fit(problems, val, {"expert_traces": traces, "p0": p0, **teacher}, ctx.work_dir)
    finally:
        grade.grader.close()
    trainer.save_outputs(ctx.out_dir)
    return summary


def _check_prompt_budget(problems, tok, params: Params) -> None:
    """The sweep's prompt budget (``max_prompt_length``) holds for every training prompt."""
    from components.data.prompting import encode_prompt

    for p in problems:
        n = len(encode_prompt(p, tok, params.prompt_template))
        if n > params.max_prompt_length:
            raise ValueError(f"train: prompt {p.uid} has {n} tokens, above max_prompt_length "
                             f"{params.max_prompt_length} (the sweep's max_prompt_tokens)")
