"""A rollout engine over vLLM's offline ``LLM`` (GPU evaluation, filtering, rollouts).

Each ``Request`` is one vLLM prompt given as token ids (``{"prompt_token_ids": ...}``, so a
replayed prefix reaches the model exactly as the method built it) with ``n`` samples.
Prefix caching is on: the n samples of a request, and requests that share a prompt
(VSR's replayed states), reuse the prompt's KV blocks -- the property the HF engine gets from
copying one prefill's cache. Each request gets its own seed derived from
``SamplingParams.seed``, so the same requests and seed give the same completions.

``vllm`` is imported in the constructor only: the CPU environment never has it, and the
kwargs mapping and output conversion below are plain functions tested without it.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from components.engine.base import PURPOSES, Completion, Request, SamplingParams, TokenMeter, check_sampling

MISSING_VLLM = ("vllm is not installed: the vLLM engine runs in the trainer image "
                "(images/trainer, ghcr.io/rlvr-sweeps/trainer; pip install 'rlvr-sweeps[gpu]' on a CUDA machine)")


def request_seed(seed: int | None, index: int) -> int | None:
    """One seed per request (vLLM seeds each request's n samples from it)."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), index]).generate_state(1)[0])


def sampling_kwargs(params: SamplingParams, n: int, index: int = 0, stop: Sequence[str] = (),
                    stop_token_ids: Sequence[int] = ()) -> dict[str, Any]:
    """kwargs of ``vllm.SamplingParams`` for request ``index`` of a call."""
    check_sampling(params, min_new_tokens=1)   # vLLM rejects max_tokens=0
    kw: dict[str, Any] = {"n": int(n), "temperature": float(params.temperature), "top_p": float(params.top_p),
                          "max_tokens": int(params.max_new_tokens), "skip_special_tokens": True}
    if stop:
        kw["stop"] = list(stop)
    if stop_token_ids:
        kw["stop_token_ids"] = [int(t) for t in stop_token_ids]
    seed = request_seed(params.seed, index)
    if seed is not None:
        kw["seed"] = seed
    return kw


def prompt_input(request: Request) -> dict[str, Any]:
    """vLLM ``TokensPrompt``: the context ids as they are (no re-tokenization)."""
    return {"prompt_token_ids": [int(t) for t in request.context_ids]}


def to_completions(outputs: Sequence[Any]) -> list[list[Completion]]:
    """vLLM ``RequestOutput``s (``.outputs[i].text/.token_ids/.finish_reason``) -> ours.
    vLLM's finish reasons are "stop" (EOS or a stop string / id) and "length"."""
    out = []
    for ro in outputs:
        comps = []
        for co in ro.outputs:
            reason = co.finish_reason if co.finish_reason in ("stop", "length") else "stop"
            comps.append(Completion(token_ids=tuple(int(t) for t in co.token_ids), text=co.text,
                                    finish_reason=reason))
        out.append(comps)
    return out


def meter_counts(requests: Sequence[Request], outputs: Sequence[Any]) -> dict[str, int]:
    """What one call records: each context once (its n samples share the prefix cache),
    every sampled id, sum of n."""
    ran = [(r, o) for r, o in zip(requests, outputs) if r.n > 0]
    return {"prompt_tokens": sum(len(o.prompt_token_ids) for _, o in ran),
            "generated_tokens": sum(len(c.token_ids) for _, o in ran for c in o.outputs),
            "sequences": sum(len(o.outputs) for _, o in ran), "requests": len(requests)}


class VLLMEngine:
    """``RolloutEngine`` over ``vllm.LLM``. ``model`` is a model directory (``save_pretrained``
    layout, tokenizer included) or a hub name; ``llm_kwargs`` go to ``vllm.LLM``."""

    def __init__(self, model: str, meter: TokenMeter | None = None, stop: Sequence[str] = (),
                 stop_token_ids: Sequence[int] = (), **llm_kwargs: Any):
        try:
            import vllm
        except ImportError:
            raise ImportError(MISSING_VLLM) from None
        self._vllm = vllm
        kwargs = {"enable_prefix_caching": True, "seed": 0, **llm_kwargs}
        self.llm = vllm.LLM(model=str(model), **kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.meter = meter if meter is not None else TokenMeter()
        self.stop, self.stop_token_ids = tuple(stop), tuple(stop_token_ids)

    def generate(self, requests: Sequence[Request], params: SamplingParams,
                 purpose: str = "train_rollout") -> list[list[Completion]]:
        if purpose not in PURPOSES:
            raise ValueError(f"unknown token purpose '{purpose}' (known: {', '.join(PURPOSES)})")
        live = [i for i, r in enumerate(requests) if r.n > 0]
        sps = [self._vllm.SamplingParams(**sampling_kwargs(params, requests[i].n, i, self.stop, self.stop_token_ids))
               for i in live]
        outputs = self.llm.generate([prompt_input(requests[i]) for i in live], sps, use_tqdm=False) if live else []
        comps = to_completions(outputs)
        out: list[list[Completion]] = [[] for _ in requests]
        for i, c in zip(live, comps):
            out[i] = c
        counts = meter_counts([requests[i] for i in live], outputs)
        self.meter.record(purpose, prompt_tokens=counts["prompt_tokens"],
                          generated_tokens=counts["generated_tokens"], sequences=counts["sequences"],
                          requests=len(requests))
        return out
