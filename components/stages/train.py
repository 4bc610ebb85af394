"""train: one training run (one method, one seed) with the embedded trainer.

Inputs: ``model`` (the base policy), ``hard`` (training prompts + held-out set for
validation), ``prefixes`` (expert traces: VSR's cold-start seeds and the SFT set).
Checkpoints live in the stage's work dir, so a killed or retried task resumes from its
last checkpoint. ``backend: verl`` (GPU, issue 5) maps the same params to verl.
"""
from __future__ import annotations

from typing import Literal

from components.stages.base import StageContext
from components.trainer.config import TrainConfig

NAME = "train"
VERSION = 1
INPUTS = ("model", "hard", "prefixes")


class Params(TrainConfig):
    backend: Literal["embedded"] = "embedded"
    threads: int | None = None


def run(params: Params, ctx: StageContext) -> dict:
    from components.data.schema import read_problems
    from components.stages.common import grade_fn, load_model, read_json, set_threads
    from components.trainer.embedded import EmbeddedTrainer

    set_threads(params.threads)
    model, tok = load_model(ctx.input("model"))
    hard_dir = ctx.input("hard")
    problems = read_problems(hard_dir / "train.jsonl")
    val = read_problems(hard_dir / "heldout.jsonl")
    traces = read_json(ctx.input("prefixes") / "traces.json")
    p0 = {p.uid: p.meta.get("base_pass_rate", 0.0) for p in problems}
    cfg = TrainConfig(**params.model_dump(exclude={"backend", "threads"}))
    grade = grade_fn(params.grading_timeout_s)
    try:
        trainer = EmbeddedTrainer(cfg, model, tok, grade, ctx.tracker)
        summary = trainer.fit(problems, val, {"expert_traces": traces, "p0": p0}, ctx.work_dir)
    finally:
        grade.grader.close()
    trainer.save_outputs(ctx.out_dir)
    return summary
