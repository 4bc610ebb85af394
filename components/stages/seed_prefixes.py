"""seed_prefixes: the expert traces of the training items, on every task (the task's data-stage part).

Episodes: the paper's agentic runs use no expert trajectories (the VSR buffer fills with the
policy's own successes only), so ``traces.json`` is empty unless ``expert_episodes: true``: then
the environment expert's episode (action texts) for each kept map seed, seed -> actions, which
the episodic VSR inserts when its ``expert_seed`` is on.

Math: one verified expert trace per hard prompt. The trace must end in a ``\\boxed{}`` answer that math-verify grades correct against
the gold (for OpenR1 data, also ``is_reasoning_complete``). Outputs:
- ``sft.jsonl``: the SFT set — exactly the hard prompts with their one expert trace;
- ``traces.json``: uid -> trace, what VSR seeds its buffer with (cut by its own config);
- ``prefix_pool.jsonl``: the expert prefix states at ``cut_fractions`` (the static pool
  for expert-prefix resets; also a readable view of what gets replayed).
"""
from __future__ import annotations

from pydantic import Field

from components.stages.base import StageContext, TaskParams

NAME = "seed_prefixes"
VERSION = 2
TASKS = ("math", "agentic")
INPUTS = ("hard",)


class Params(TaskParams):
    ADDED_FIELDS = ("task", "expert_episodes")
    ONLY = {"traces_per_prompt": "math", "cut_fractions": "math", "grading_timeout_s": "math",
            "expert_episodes": "agentic"}
    traces_per_prompt: int = Field(1, ge=1)
    cut_fractions: list[float] = [0.25, 0.5, 0.75]
    grading_timeout_s: float = Field(5.0, gt=0)
    expert_episodes: bool = Field(False, description="agentic: the environment expert's episode per kept seed")


def run(params: Params, ctx: StageContext) -> dict:
    from components.stages.task_parts import data_stages

    return data_stages(params.task).seed_prefixes(params, ctx)
