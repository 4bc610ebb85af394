"""Training mixtures: several real datasets as one problem set, for the models a sweep trains on
more data than the others (VIGOR's 7B and Phi runs: MATH + DAPO-Math-17k, "following prior work",
GRESO; its 1.5B / 3B runs: MATH alone).

``prepare_data``'s ``mixtures`` names each one (``name: [{source, path, limit}, ...]``); the stage
writes it beside the base set, split into a training and a held-out pool the way the base set is
(seeded shuffle, ``heldout_fraction``), under ``mixtures/<name>/``. The sweep's ``model_data``
maps a model to a mixture, and that model's ``filter_hard`` reads its pools from there. Parts are
concatenated in order; a problem (by uid: the loaders namespace them by source) met again in a
later part is dropped and counted as a duplicate. Pydantic only at import: the loaders (and
their parsers) load when a mixture is written.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MIXTURES_DIR = "mixtures"
POOLS = ("train_pool.jsonl", "heldout_pool.jsonl")
NAME_PATTERN = r"^[a-z0-9][a-z0-9_]*$"      # a directory name, and a sweep field value


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: Literal["openr1", "math", "dapo17k"]
    path: str = Field(description="dataset file/dir, as prepare_data's path")
    limit: int | None = Field(None, ge=1, description="read at most this many problems of this part")


def load_mixture(parts: tuple[Part, ...] | list[Part], on_error: Literal["raise", "skip"] = "raise"):
    """The parts' problems, concatenated, first copy of a uid kept (``Problems`` with a summed report)."""
    from components.data import loaders

    out, seen, report = [], set(), loaders.LoadReport(source="+".join(p.source for p in parts))
    for part in parts:
        got = loaders.LOADERS[part.source](part.path, on_error=on_error, limit=part.limit)
        if not got:
            raise ValueError(f"mixture part {part.source} {part.path}: no problems loaded ({got.report})")
        for k in ("rows", "skipped", "filtered", "duplicates", "conflicts", "repaired"):
            setattr(report, k, getattr(report, k) + getattr(got.report, k))
        report.errors += got.report.errors[:loaders.MAX_KEPT_ERRORS - len(report.errors)]
        for p in got:
            if p.uid in seen:
                report.duplicates += 1
                continue
            seen.add(p.uid)
            out.append(p)
    report.loaded = len(out)
    return loaders.Problems(out, report)


def split_pools(problems: list, heldout_fraction: float, seed: int) -> tuple[list, list]:
    """(training pool, held-out pool): a seeded shuffle's first ``heldout_fraction`` held out,
    both in the original order."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(problems))
    n_held = int(round(heldout_fraction * len(problems)))
    return [problems[i] for i in sorted(order[n_held:])], [problems[i] for i in sorted(order[:n_held])]


def write_mixtures(mixtures: dict[str, tuple[Part, ...]], out_dir: Path, *, heldout_fraction: float, seed: int,
                   on_error: Literal["raise", "skip"] = "raise") -> dict[str, int]:
    """Each mixture's pools under ``out_dir/mixtures/<name>/`` and its load report; the row
    counts, as ``<name>/train_pool`` and ``<name>/heldout_pool``."""
    from components.data.schema import write_problems

    counts = {}
    for name, parts in mixtures.items():
        d = Path(out_dir) / MIXTURES_DIR / name
        d.mkdir(parents=True, exist_ok=True)
        problems = load_mixture(parts, on_error)
        for fname, pool in zip(POOLS, split_pools(problems, heldout_fraction, seed)):
            counts[f"{name}/{fname.removesuffix('.jsonl')}"] = write_problems(d / fname, pool)
        rep = problems.report
        (d / "stats.json").write_text(json.dumps({"parts": [p.model_dump() for p in parts],
                                                  "load": {k: v for k, v in vars(rep).items() if k != "errors"},
                                                  "errors": rep.errors}, indent=2))
    return counts


def pools_dir(data_dir: Path, mixture: str | None) -> Path:
    """Where a filter reads its pools: the base set's, or the named mixture's."""
    if mixture is None:
        return Path(data_dir)
    d = Path(data_dir) / MIXTURES_DIR / mixture
    if not all((d / f).is_file() for f in POOLS):
        raise ValueError(f"data_mixture: {d} holds no pools (is {mixture!r} in prepare_data's mixtures?)")
    return d
