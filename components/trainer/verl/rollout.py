"""A ``RolloutEngine`` backed by verl's rollout workers (DataProto in, DataProto out).

A method's ``RolloutContext.sample_groups`` runs unchanged on top of it: every
``Request`` (a prompt, or a prompt + replayed prefix for VSR; any ``n``, so VIGOR's rounds,
DAPO's refills and per-prompt budgets all pass) becomes one row, rows are repeated per
request with ``DataProto.sample_level_repeat(ns)``, padded to the rollout divisor (verl
splits a batch evenly over its agent-loop workers), sent to ``generate_sequences``
(``AgentLoopManager.generate_sequences`` in the trainer), un-padded and turned back into
``Completion``s. Pad rows are real generations that are thrown away: their tokens are
metered as ``discarded``.

Each row carries its own sampling overrides (``sampling``: max_tokens, temperature, top_p and a
per-sample seed derived from ``SamplingParams.seed``) for ``agent_loop.ContextIdsAgentLoop``.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from components.engine.base import (Completion, Request, SamplingParams, TokenMeter, check_purpose,
                                    split_runs)
from components.trainer.sequences import pad_rows

AGENT_LOOP_NAME = "rlvr_context_ids"


def sample_seed(seed: int | None, request_index: int, sample_index: int) -> int | None:
    """Distinct, reproducible seed per sample: same (seed, requests) -> same completions."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), request_index, sample_index]).generate_state(1)[0])


def row_sampling(params: SamplingParams, request_index: int, sample_index: int) -> dict[str, Any]:
    """One row's sampling overrides for the agent loop (``sampling`` kwarg): the budget, the
    temperature, top-p and the sample's own seed."""
    s: dict[str, Any] = {"max_tokens": params.max_new_tokens, "temperature": params.temperature,
                         "top_p": params.top_p}
    seed = sample_seed(params.seed, request_index, sample_index)
    if seed is not None:
        s["seed"] = seed
    return s


def object_array(values: Sequence[Any]) -> np.ndarray:
    """A 1-D object array of ``values`` (``np.array`` would stack equal-length lists into 2-D)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def requests_to_dataproto(requests: Sequence[Request], params: SamplingParams, pad_id: int):
    """One row per (request, sample), request order, samples of a request adjacent."""
    from verl import DataProto

    if not requests:
        raise ValueError("requests_to_dataproto: no requests")
    ids, att = pad_rows([r.context_ids for r in requests], pad_id, left=True)
    base = DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": att, "position_ids": (att.cumsum(-1) - 1).clamp(min=0)},
        non_tensors={"context_ids": object_array([list(r.context_ids) for r in requests]),
                     "request_index": np.arange(len(requests), dtype=np.int64),
                     "tag": np.array([r.tag for r in requests], dtype=object)})
    rep = base.sample_level_repeat([r.n for r in requests])
    rep.non_tensor_batch["sampling"] = object_array([row_sampling(params, ri, j)
                                                     for ri, r in enumerate(requests) for j in range(r.n)])
    # verl's postprocess copies raw_prompt through; our contexts are ids
    rep.non_tensor_batch["raw_prompt"] = object_array([[] for _ in range(len(rep))])
    rep.non_tensor_batch["agent_name"] = np.array([AGENT_LOOP_NAME] * len(rep), dtype=object)
    return rep


def dataproto_to_completions(out, tokenizer, eos_id: int) -> list[Completion]:
    """verl's generation output (``responses`` right-padded, ``attention_mask`` over
    prompt + response) -> one Completion per row."""
    responses = out.batch["responses"]
    R = responses.shape[1]
    valid = out.batch["attention_mask"][:, -R:].bool()
    comps = []
    for i in range(responses.shape[0]):
        ids = responses[i][valid[i]].tolist()
        stopped = bool(ids) and ids[-1] == eos_id
        comps.append(Completion(token_ids=tuple(ids), text=tokenizer.decode(ids, skip_special_tokens=True),
                                finish_reason="stop" if stopped else "length"))
    return comps


class VerlRolloutEngine:
    """``RolloutEngine`` over a verl ``generate_sequences(DataProto) -> DataProto``."""

    def __init__(self, generate_sequences: Callable[[Any], Any], tokenizer: Any,
                 meter: TokenMeter | None = None, divisor: int = 1, meta_info: dict | None = None):
        if divisor < 1:
            raise ValueError(f"divisor must be >= 1, got {divisor}")
        self.generate_sequences = generate_sequences
        self.tokenizer = tokenizer
        self.meter = meter if meter is not None else TokenMeter()
        self.divisor = int(divisor)
        self.meta_info = dict(meta_info or {})
        self.eos_id = int(tokenizer.eos_token_id)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)

    def generate(self, requests: Sequence[Request], params: SamplingParams,
                 purpose: str = "train_rollout") -> list[list[Completion]]:
        from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto

        check_purpose(purpose)
        out: list[list[Completion]] = [[] for _ in requests]
        live = [i for i, r in enumerate(requests) if r.n > 0]
        gen_tokens = pad_tokens = filler_rows = 0
        if live:
            batch = requests_to_dataproto([requests[i] for i in live], params, self.pad_id)
            batch.meta_info.update({"eos_token_id": self.eos_id, "pad_token_id": self.pad_id,
                                    "validate": purpose in ("validation", "eval"), **self.meta_info})
            padded, filler_rows = pad_dataproto_to_divisor(batch, self.divisor)
            result = self.generate_sequences(padded)
            if len(result) != len(padded):
                raise RuntimeError(f"generate_sequences returned {len(result)} rows for {len(padded)}")
            kept = unpad_dataproto(result, filler_rows)
            comps = dataproto_to_completions(kept, self.tokenizer, self.eos_id)
            if filler_rows:
                tail = dataproto_to_completions(result[len(kept):], self.tokenizer, self.eos_id)
                pad_tokens = sum(len(c.token_ids) for c in tail)
            for i, mine in zip(live, split_runs(comps, [requests[i].n for i in live])):
                out[i] = mine
            gen_tokens = sum(len(c.token_ids) for c in comps)
        self.meter.record(purpose, prompt_tokens=sum(len(requests[i].context_ids) for i in live),
                          generated_tokens=gen_tokens, sequences=sum(len(c) for c in out), requests=len(requests))
        if filler_rows:
            # generated to fill the divisor, then dropped: counted, never lost
            self.meter.record("discarded", prompt_tokens=0, generated_tokens=pad_tokens, sequences=filler_rows,
                              requests=0)
        return out
