"""The rollout-engine protocol every method talks to, and the token meter.

A method never sees a framework: it builds ``Request``s (a context of token ids and
how many samples ``n``) and gets back ``Completion``s. The context is the prompt
plus, for replayed states, a prefix of an earlier response; the engine counts it as
prompt tokens (processed once per request, since the n samples of a request share
its KV cache) and only newly sampled tokens as generated tokens.
"""
from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

PURPOSES = ("pretrain", "filter", "train_rollout", "discarded", "eval", "validation", "probe")
# what a meter row counts, beside its purpose and tags
COUNTS = ("prompt_tokens", "generated_tokens", "sequences", "requests")


def check_purpose(purpose: str) -> None:
    if purpose not in PURPOSES:
        raise ValueError(f"unknown token purpose '{purpose}' (known: {', '.join(PURPOSES)})")


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int | None = None       # same seed + same requests -> same completions


@dataclass(frozen=True)
class Request:
    context_ids: tuple[int, ...]  # prompt ids (+ replayed prefix ids); never in the loss
    n: int = 1                    # samples to draw from this context
    prompt_len: int | None = None  # how many leading context ids are the original prompt (rest = replayed prefix)
    tag: str = ""                 # free-form: who asked (prompt uid, prefix id, ...)

    def __post_init__(self):
        if self.n < 0:
            raise ValueError(f"Request.n must be >= 0, got {self.n}")
        if len(self.context_ids) == 0:
            raise ValueError("Request.context_ids is empty")


@dataclass(frozen=True)
class Completion:
    token_ids: tuple[int, ...]    # generated ids only (EOS included when it was sampled)
    text: str                     # decoded generated text (special tokens skipped)
    finish_reason: str            # "stop" (EOS) or "length"


@runtime_checkable
class RolloutEngine(Protocol):
    tokenizer: Any
    meter: "TokenMeter"

    def generate(self, requests: Sequence[Request], params: SamplingParams,
                 purpose: str = "train_rollout") -> list[list[Completion]]:
        """One list of ``request.n`` completions per request, in request order."""
        ...


@dataclass
class MeterRecord:
    purpose: str
    prompt_tokens: int
    generated_tokens: int
    sequences: int
    requests: int
    tags: dict[str, Any] = field(default_factory=dict)


class TokenMeter:
    """Counts every engine call: prompt tokens, generated tokens, sequences, by purpose and tags.

    Tags (sweep, stage, method, step, ...) come from ``with meter.tagged(step=3):`` blocks.
    Rollouts a method throws away after generation are moved to purpose ``discarded``
    with ``reclassify`` so they are counted once and never lost.
    """

    def __init__(self, **tags: Any):
        self.records: list[MeterRecord] = []
        self._tags: dict[str, Any] = dict(tags)
        self._lock = threading.Lock()

    @contextmanager
    def tagged(self, **tags: Any) -> Iterator["TokenMeter"]:
        old = dict(self._tags)
        self._tags.update(tags)
        try:
            yield self
        finally:
            self._tags = old

    def record(self, purpose: str, prompt_tokens: int, generated_tokens: int, sequences: int,
               requests: int = 1) -> None:
        check_purpose(purpose)
        with self._lock:
            self.records.append(MeterRecord(purpose, int(prompt_tokens), int(generated_tokens),
                                            int(sequences), int(requests), dict(self._tags)))

    def reclassify(self, to_purpose: str, generated_tokens: int, sequences: int,
                   from_purpose: str = "train_rollout") -> None:
        """Move already-counted generated tokens to another purpose (e.g. discarded rollouts)."""
        self.record(from_purpose, 0, -generated_tokens, -sequences, requests=0)
        self.record(to_purpose, 0, generated_tokens, sequences, requests=0)

    def totals(self, purpose: str | None = None, **match: Any) -> dict[str, int]:
        out = defaultdict(int)
        for r in self.records:
            if purpose is not None and r.purpose != purpose:
                continue
            if any(r.tags.get(k) != v for k, v in match.items()):
                continue
            for k in COUNTS:
                out[k] += getattr(r, k)
        return {k: out[k] for k in COUNTS}

    def by_purpose(self) -> dict[str, dict[str, int]]:
        return {p: self.totals(p) for p in sorted({r.purpose for r in self.records})}

    def to_rows(self) -> list[dict[str, Any]]:
        return [{"purpose": r.purpose, **{k: getattr(r, k) for k in COUNTS}, **r.tags} for r in self.records]

    def state_dict(self) -> dict[str, Any]:
        return {"rows": self.to_rows()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        keys = {"purpose", *COUNTS}
        self.records = [MeterRecord(r["purpose"], *(r[k] for k in COUNTS),
                                    {k: v for k, v in r.items() if k not in keys}) for r in state["rows"]]


def check_sampling(params: SamplingParams, min_new_tokens: int = 0) -> None:
    """One-line errors for sampling settings no engine can honour."""
    if params.temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {params.temperature}")
    if not (0 < params.top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
    if params.max_new_tokens < min_new_tokens:
        raise ValueError(f"max_new_tokens must be >= {min_new_tokens}, got {params.max_new_tokens}")


def fill_in_order(items: Sequence[Any], sizes: Sequence[int], budget: int) -> list[list[Any]]:
    """``items`` in order, cut into runs whose ``sizes`` add up to at most ``budget`` (an item
    larger than the budget runs alone)."""
    out: list[list[Any]] = []
    used = 0
    for item, size in zip(items, sizes):
        if not out or used + size > budget:
            out.append([])
            used = 0
        out[-1].append(item)
        used += size
    return out


def split_runs(items: Sequence[Any], counts: Sequence[int]) -> list[list[Any]]:
    """``items`` cut into consecutive runs of ``counts[i]`` items (request i's samples)."""
    ends = list(itertools.accumulate(counts))
    return [list(items[end - k:end]) for k, end in zip(counts, ends)]
