"""filter_hard: keep the training items the base policy almost never solves, on every task
(the task's ``filter_hard``).

Math: 
k samples per prompt at the base policy's sampling settings; a prompt is kept when it
has at most c successes (VSR paper: pass@32 <= 1, i.e. k=32, c=1). Sampling runs in
rounds of ``round_size`` and stops early for a prompt once it has more than c
successes: the keep/drop decision and the kept prompts' success counts are exactly
those of k samples, at a fraction of the cost (every generated token is still metered
with purpose ``filter``). Applied to the training pool and, identically, to the
held-out pool (the evaluation set of the embedded sweep).

Episodes: ``k`` episodes per train-pool map seed; a seed is kept with at most ``c`` successes
and at least ``min_successes`` (0 keeps the paper's hard regime; 1 keeps seeds the policy can
solve at all, where learning from its own successes can start). The held-out map seeds are not
filtered: evaluation is on the fixed held-out seeds (the paper's protocol).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from components.stages.base import Device, StageContext, TaskParams, check_engine_device
from components.budget import DEFAULT_RESPONSE_TOKENS

NAME = "filter_hard"
VERSION = 2
TASKS = ("math", "agentic")
INPUTS = ("data", "model")


class Params(TaskParams):
    ADDED_FIELDS = ("prompt_template", "engine", "keep_all", "min_pass", "max_pass", "filter_model", "data_mixture",
                    "task", "min_successes", "device")
    TASK_DEFAULTS = {"agentic": {"k": 8, "max_new_tokens": 8, "max_prompts": 64}}
    ONLY = {"round_size": "math", "max_heldout": "math", "requests_per_call": "math", "min_pass": "math",
            "max_pass": "math", "filter_model": "math", "data_mixture": "math", "min_successes": "agentic"}
    k: int = Field(32, ge=1)
    c: int = Field(1, ge=0)
    round_size: int = Field(8, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(DEFAULT_RESPONSE_TOKENS, ge=1)
    max_prompts: int = Field(1000, ge=1, description="cap on kept training prompts (VSR: 1K)")
    max_heldout: int = Field(256, ge=0)
    requests_per_call: int = Field(128, ge=1)
    seed: int = 0
    threads: int | None = None
    # "chat" for an instruction-tuned base policy (the papers' Qwen/Llama models): the same
    # rendering the train and evaluate stages use, so "hard" means hard in that format
    prompt_template: Literal["raw", "chat"] = "raw"
    engine: Literal["hf", "vllm"] = "hf"      # vllm: on a GPU, in the trainer image
    device: Device = "cpu"                    # engine hf: where the policy runs (auto: cuda when present)
    # keep every prompt of the pools without sampling (papers that train on the whole dataset:
    # VIGOR, VIP); the caps max_prompts / max_heldout still apply
    keep_all: bool = False
    # the pools of one of prepare_data's mixtures instead of the base set (the sweep's model_data)
    data_mixture: str | None = None
    # a difficulty band instead of "hard": keep the prompts whose pass rate over all k samples
    # lies in [min_pass, max_pass] (both inclusive; ``c`` is then unused). The sanity sweep's
    # "solved sometimes" prompts: min_pass 0.2, max_pass 0.8.
    min_pass: float | None = Field(None, ge=0, le=1)
    max_pass: float | None = Field(None, ge=0, le=1)
    # the one model whose pass rates define the hard subset of every model of the sweep (the
    # VSR paper filters once, with Qwen2.5-7B-Instruct, and trains Llama-3.2-3B on that subset
    # too); read by the stage graph, which then runs this stage once. None: each model filters
    # with itself.
    filter_model: str | None = None
    min_successes: int = Field(0, ge=0, description="agentic: fewest successes of a kept map seed")

    @model_validator(mode="after")
    def _c_below_k(self):
        check_engine_device(self.engine, self.device)
        if self.band:
            if (self.min_pass or 0.0) > (1.0 if self.max_pass is None else self.max_pass):
                raise ValueError(f"min_pass ({self.min_pass}) must be <= max_pass ({self.max_pass})")
            return self
        if self.c >= self.k:
            raise ValueError(f"c ({self.c}) must be < k ({self.k}): otherwise every item is 'hard'")
        if self.min_successes > self.c:
            raise ValueError(f"min_successes: {self.min_successes} is above c ({self.c}): nothing can be kept")
        return self

    @property
    def band(self) -> bool:
        return self.min_pass is not None or self.max_pass is not None

    @property
    def max_successes(self) -> int:
        """Most successes a kept prompt may have (sampling stops for a prompt beyond it)."""
        if not self.band:
            return self.c
        return self.k if self.max_pass is None else int(self.max_pass * self.k + 1e-9)

    def keeps(self, successes: int, drawn: int) -> bool:
        if not self.band:
            return successes <= self.c
        lo = 0.0 if self.min_pass is None else self.min_pass
        return drawn == self.k and lo * self.k - 1e-9 <= successes <= self.max_successes


def run(params: Params, ctx: StageContext) -> dict:
    from components.stages.common import set_threads
    from components.stages.task_parts import data_stages

    set_threads(params.threads)
    return data_stages(params.task).filter_hard(params, ctx)
