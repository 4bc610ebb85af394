"""prepare_data: the problem sets of a sweep, in the canonical schema.

``synthetic`` (the embedded default): an easy pretraining set with expert traces, a
training pool and a disjoint held-out pool of harder chains; ``filter_hard`` keeps the
prompts the base policy almost never solves.

``openr1`` / ``math`` / ``dapo17k``: a real dataset read by ``components.data.loaders``
from ``path`` (a file, a directory of files, or a Hugging Face dataset name when the network
allows), split by a seeded shuffle into the training pool and a held-out pool
(``heldout_fraction``). Malformed rows stop the stage with file:line, or are skipped and
counted with ``on_error: skip``. A real model needs no pretraining set, so
``pretrain.jsonl`` and ``probe.jsonl`` are empty there.
"""
from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from components.data.mixtures import NAME_PATTERN, Part, write_mixtures

from components.stages.base import StageContext, StageParams

NAME = "prepare_data"
VERSION = 2
INPUTS: tuple[str, ...] = ()


class Params(StageParams):
    ADDED_FIELDS = ("path", "on_error", "limit", "heldout_fraction", "mixtures")

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

    @model_validator(mode="after")
    def _path_for_real_sources(self):
        if self.source != "synthetic" and not self.path:
            raise ValueError(f"source '{self.source}' needs 'path' (a file, directory or dataset name)")
        if self.mixtures and self.source == "synthetic":
            raise ValueError("mixtures: real datasets beside a real base set (source is synthetic)")
        return self


def run_real(p: Params, ctx: StageContext) -> dict:
    import numpy as np

    from components.data import loaders
    from components.data.schema import write_problems

    load = {"openr1": loaders.load_openr1, "math": loaders.load_math, "dapo17k": loaders.load_dapo17k}[p.source]
    problems = load(p.path, on_error=p.on_error, limit=p.limit)
    if not problems:
        raise ValueError(f"prepare_data: {p.path}: no problems loaded ({problems.report})")
    order = np.random.default_rng(p.seed).permutation(len(problems))
    n_held = int(round(p.heldout_fraction * len(problems)))
    heldout = [problems[i] for i in sorted(order[:n_held])]
    pool = [problems[i] for i in sorted(order[n_held:])]
    counts = {"pretrain": write_problems(ctx.out_dir / "pretrain.jsonl", []),
              "train_pool": write_problems(ctx.out_dir / "train_pool.jsonl", pool),
              "heldout_pool": write_problems(ctx.out_dir / "heldout_pool.jsonl", heldout),
              "probe": write_problems(ctx.out_dir / "probe.jsonl", [])}
    rep = problems.report
    report = {k: v for k, v in vars(rep).items() if k != "errors"}
    (ctx.out_dir / "stats.json").write_text(json.dumps({**counts, "load": report, "errors": rep.errors},
                                                       indent=2))
    ctx.tracker.log_metrics({**{f"rows/{k}": v for k, v in counts.items()},
                             **{f"load/{k}": v for k, v in report.items() if isinstance(v, (int, float))}})
    mixed = write_mixtures(p.mixtures, ctx.out_dir, heldout_fraction=p.heldout_fraction, seed=p.seed,
                           on_error=p.on_error)
    if mixed:
        ctx.tracker.log_metrics({f"rows/{k}": v for k, v in mixed.items()})
    return {**counts, **mixed, "skipped": rep.skipped, "filtered": rep.filtered}


def run(params: Params, ctx: StageContext) -> dict:
    if params.source != "synthetic":
        return run_real(params, ctx)
    from components.data.schema import write_problems
    from components.data.synthetic import generate_problems

    p = params
    pretrain = generate_problems(p.pretrain_size, p.pretrain_levels, seed=p.seed * 3 + 0,
                                 operand_digits=p.operand_digits, source="synthetic-pretrain")
    used = {x.uid for x in pretrain}
    pool = generate_problems(p.pool_size, p.pool_levels, seed=p.seed * 3 + 1, operand_digits=p.operand_digits,
                             source="synthetic-train", exclude=used)
    used |= {x.uid for x in pool}
    heldout = generate_problems(p.heldout_pool_size, p.pool_levels, seed=p.seed * 3 + 2,
                                operand_digits=p.operand_digits, source="synthetic-heldout", exclude=used)
    used |= {x.uid for x in heldout}
    probe = [x for i, lv in enumerate(p.probe_levels)
             for x in generate_problems(p.probe_per_level, [lv], seed=p.seed * 3 + 1000 + i,
                                        operand_digits=p.operand_digits, source="synthetic-probe", exclude=used)]
    counts = {"pretrain": write_problems(ctx.out_dir / "pretrain.jsonl", pretrain),
              "train_pool": write_problems(ctx.out_dir / "train_pool.jsonl", pool),
              "heldout_pool": write_problems(ctx.out_dir / "heldout_pool.jsonl", heldout),
              "probe": write_problems(ctx.out_dir / "probe.jsonl", probe)}
    (ctx.out_dir / "stats.json").write_text(json.dumps(counts, indent=2))
    ctx.tracker.log_metrics({f"rows/{k}": v for k, v in counts.items()})
    return counts
