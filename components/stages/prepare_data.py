"""prepare_data: the item pools of a sweep, on every task (the task's ``prepare_data``).

Math: problem sets in the canonical schema.
``synthetic`` (the embedded default): an easy pretraining set with expert traces, a
training pool and a disjoint held-out pool of harder chains; ``filter_hard`` keeps the
prompts the base policy almost never solves.

``openr1`` / ``math`` / ``dapo17k``: a real dataset read by ``components.data.loaders``
from ``path`` (a file, a directory of files, or a Hugging Face dataset name when the network
allows), split by a seeded shuffle into the training pool and a held-out pool
(``heldout_fraction``). Malformed rows stop the stage with file:line, or are skipped and
counted with ``on_error: skip``. A real model needs no pretraining set, so
``pretrain.jsonl`` and ``probe.jsonl`` are empty there.

Episodes: ``env.json`` (the environment's name and config, read by every later stage) and
``seeds.json``: ``pretrain`` map seeds (behaviour-cloning demonstrations), the ``train_pool``
(what filter_hard filters) and ``heldout``, the fixed evaluation seeds (128, the paper's
protocol); the three ranges are disjoint by construction.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from components.data.mixtures import NAME_PATTERN, Part
from components.stages.base import StageContext, TaskParams

NAME = "prepare_data"
VERSION = 2
TASKS = ("math", "agentic")
INPUTS: tuple[str, ...] = ()
MATH_ONLY = ("source", "path", "on_error", "limit", "heldout_fraction", "mixtures", "seed", "operand_digits",
             "pretrain_size", "pretrain_levels", "pool_size", "heldout_pool_size", "pool_levels", "probe_per_level",
             "probe_levels")


class Params(TaskParams):
    ADDED_FIELDS = ("path", "on_error", "limit", "heldout_fraction", "mixtures", "task", "env", "env_config",
                    "pretrain_seeds", "train_pool", "heldout")
    ONLY = {**{k: "math" for k in MATH_ONLY},
            **{k: "agentic" for k in ("env", "env_config", "pretrain_seeds", "train_pool", "heldout")}}

    source: Literal["synthetic", "openr1", "math", "dapo17k"] = "synthetic"
    path: str | None = Field(None, description="dataset file/dir (real sources)")
    on_error: Literal["raise", "skip"] = "raise"
    limit: int | None = Field(None, ge=1, description="read at most this many problems (real sources)")
    heldout_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="share of a real dataset held out")
    seed: int = 0
    # named training mixtures beside the base set (components/data/mixtures.py)
    mixtures: dict[Annotated[str, StringConstraints(pattern=NAME_PATTERN)], tuple[Part, ...]] = {}
    # 1-digit operands: a 0.8M-parameter model learns the arithmetic in ~300 steps, and the
    # chain length alone sets the difficulty
    operand_digits: int = Field(1, ge=1, le=4)
    pretrain_size: int = Field(8000, ge=1)
    pretrain_levels: dict[int, float] = {3: 0.3, 4: 0.3, 5: 0.2, 6: 0.15, 7: 0.05}
    pool_size: int = Field(768, ge=1, description="training candidates for filter_hard")
    heldout_pool_size: int = Field(384, ge=0, description="held-out candidates, disjoint from training")
    pool_levels: dict[int, float] = {7: 0.3, 8: 0.7}
    probe_per_level: int = Field(64, ge=0, description="fresh problems per level for the base-rate probe")
    probe_levels: list[int] = [3, 5, 7, 8]
    env: str = Field("sokoban", description="agentic: the environment (components.envs)")
    env_config: dict[str, Any] = Field(default_factory=dict)
    pretrain_seeds: int = Field(400, ge=1, description="agentic: map seeds of the demonstrations")
    train_pool: int = Field(256, ge=1, description="agentic: map seeds filter_hard filters")
    heldout: int = Field(128, ge=1, description="agentic: fixed evaluation map seeds")

    @model_validator(mode="after")
    def _path_for_real_sources(self):
        if self.source != "synthetic" and not self.path:
            raise ValueError(f"source '{self.source}' needs 'path' (a file, directory or dataset name)")
        if self.mixtures and self.source == "synthetic":
            raise ValueError("mixtures: real datasets beside a real base set (source is synthetic)")
        return self


def run(params: Params, ctx: StageContext) -> dict:
    from components.stages.task_parts import data_stages

    return data_stages(params.task).prepare_data(params, ctx)
