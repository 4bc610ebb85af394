"""A rollout engine over a plain transformers causal LM (the CPU / embedded engine).

Why not ``model.generate``: it runs a batch until its longest sequence ends and it
prefills every sample's context separately. Rollout cost in this project is dominated by
(a) n samples per context and (b) a long tail of sequences that stop early, so this
engine has its own sampling loop that

1. prefills each request's context once (contexts of similar length together, so short
   ones do not compute a long one's padding) and then copies its KV cache to the request's
   ``n`` rows (``batch_select_indices`` with repeated row ids),
2. writes each step's keys/values into reserved capacity (``_ReservedLayer``) instead of
   DynamicCache's ``torch.cat`` of the whole cache per step and layer (quadratic copying,
   the largest cost of a decode loop on CPU),
3. retires finished sequences: when enough rows have hit EOS the batch is compacted
   (cache rows dropped, and left-padding columns no remaining row needs trimmed), so the
   per-step cost shrinks with the number of live sequences, and the loop stops as soon as
   every sequence is done,
4. sorts a call's requests by context length and runs them in buckets (``BucketCost``
   picks the cuts), so one long prompt does not pad every row of the call, and
5. computes grouped-query attention on the cache without copying KV heads
   (``components.engine.attention``),
6. runs the linear layers on oneDNN with weights packed once per call
   (``components.engine.linear``; a float32 model on the CPU), both for the duration of the
   call only, and
7. computes a decode step of a Llama-family model as direct tensor operations
   (``components.engine.decode``: the same logits without transformers' per-module Python).

Sampling uses a private ``torch.Generator`` seeded from ``SamplingParams.seed``: the same
requests and seed give the same completions, and the global RNG is never touched.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Sequence

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from components.engine.attention import engine_attention
from components.engine.decode import DecodeStep
from components.engine.linear import onednn_linears
from components.engine.base import (Completion, Request, SamplingParams, TokenMeter, check_purpose,
                                    check_sampling, fill_in_order, split_runs)


class HFEngine:
    """``RolloutEngine`` over a transformers causal LM with a KV cache (Qwen2, Llama, ...)."""

    def __init__(self, model: Any, tokenizer: Any, meter: TokenMeter | None = None,
                 max_batch_sequences: int = 512, compact_fraction: float = 0.125, bucket: bool = True,
                 attention: str = "engine", linear: str = "engine", decode: str = "engine"):
        if max_batch_sequences < 1:
            raise ValueError("max_batch_sequences must be >= 1")
        self.model = model
        self.tokenizer = tokenizer
        self.meter = meter if meter is not None else TokenMeter()
        self.max_batch_sequences = int(max_batch_sequences)
        # compact once this share of the live batch has finished (1 row minimum). A compaction
        # copies the cache once, about what DynamicCache's per-step torch.cat costs anyway.
        self.compact_fraction = float(compact_fraction)
        # bucket=False / attention="model" / linear="model" / decode="model": one padded batch
        # per max_batch_sequences rows, the model's own attention, linear layers and forward
        # (the bench's "before" profile)
        for name, value in (("attention", attention), ("linear", linear), ("decode", decode)):
            if value not in ("engine", "model"):
                raise ValueError(f"{name} must be 'engine' or 'model', got {value!r}")
        self.bucket, self.attention, self.linear, self.decode = bool(bucket), attention, linear, decode
        self.cost = BucketCost(model)
        self.eos_id = int(tokenizer.eos_token_id)
        # chat models end a turn on more than one id (generation_config.eos_token_id)
        from components.hf_models import stop_token_ids
        self.stop_ids = torch.tensor(stop_token_ids(model, tokenizer), dtype=torch.long)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)

    # ------------------------------------------------------------------ public

    def generate(self, requests: Sequence[Request], params: SamplingParams,
                 purpose: str = "train_rollout") -> list[list[Completion]]:
        """One list of ``request.n`` completions per request, in request order.

        Records one meter row: prompt tokens = context lengths of the requests that were
        run (n > 0; each context is prefilled once however many samples it gets),
        generated tokens = all sampled ids (EOS included), sequences = sum of n.
        """
        check_purpose(purpose)
        check_sampling(params)
        out: list[list[Completion]] = [[] for _ in requests]
        device = next(self.model.parameters()).device
        gen = torch.Generator(device=device)
        if params.seed is not None:
            gen.manual_seed(int(params.seed))
        else:
            gen.seed()   # fresh entropy for this generator only, global RNG untouched

        was_training = self.model.training
        self.model.eval()
        try:
            attn = engine_attention(self.model) if self.attention == "engine" else nullcontext()
            lin = onednn_linears(self.model) if self.linear == "engine" else nullcontext()
            with torch.inference_mode(), attn, lin:
                step = DecodeStep.of(self.model) if self.decode == "engine" else None
                for chunk in self._chunks(requests, params.max_new_tokens):
                    contexts = [requests[ri].context_ids for ri, _ in chunk]
                    results = self._run(contexts, [k for _, k in chunk], params, gen, device, step)
                    for (ri, _), comps in zip(chunk, results):
                        out[ri].extend(comps)
        finally:
            self.model.train(was_training)

        self.meter.record(purpose,
                          prompt_tokens=sum(len(r.context_ids) for r in requests if r.n > 0),
                          generated_tokens=sum(len(c.token_ids) for cs in out for c in cs),
                          sequences=sum(len(cs) for cs in out), requests=len(requests))
        return out

    # ------------------------------------------------------------------ internals

    def _chunks(self, requests: Sequence[Request], max_new: int) -> list[list[tuple[int, int]]]:
        """(request index, samples) pieces grouped into batches of at most max_batch_sequences
        rows, by context length: requests are sorted by length and cut into contiguous
        buckets, so a long prompt only widens the rows of its own bucket. Where to cut is
        chosen by ``BucketCost.bucket`` (one more bucket costs a decode pass over the weights
        per step; a wide one costs attention over padding). A request with
        more samples than a batch holds is split (its context is then prefilled once per
        piece; the meter still counts it once, as the protocol says)."""
        order = sorted((ri for ri, r in enumerate(requests) if r.n > 0),
                       key=lambda ri: len(requests[ri].context_ids))
        m = self.max_batch_sequences
        pieces = [(ri, min(m, requests[ri].n - s)) for ri in order for s in range(0, requests[ri].n, m)]
        if not self.bucket:
            return fill_in_order(pieces, [k for _, k in pieces], self.max_batch_sequences)
        widths = [len(requests[ri].context_ids) for ri, _ in pieces]
        rows = np.cumsum([0] + [k for _, k in pieces])

        def cost(i: int, j: int) -> float | None:
            n = int(rows[j] - rows[i])
            return None if n > self.max_batch_sequences else self.cost.bucket(n, widths[j - 1], max_new)
        return [pieces[i:j] for i, j in _cheapest_cuts(len(pieces), cost)]

    def _run(self, contexts: list[tuple[int, ...]], ns: list[int], params: SamplingParams,
             gen: torch.Generator, device: torch.device, step: DecodeStep | None) -> list[list[Completion]]:
        """Sample ``ns[i]`` continuations of ``contexts[i]`` in one batch (decode steps through
        ``step`` where the model has one, else through ``model(...)``)."""
        model, max_new = self.model, params.max_new_tokens
        stop_ids = self.stop_ids.to(device)
        if max_new == 0:
            return [[Completion((), "", "length") for _ in range(k)] for k in ns]

        # 1. prefill the distinct contexts (in groups of similar length), one left-padded cache
        logits, cache, mask, pos_last = self._prefill(contexts, device)

        # 2. fan out: row r of the decode batch is a sample of context rows[r]
        rows = torch.repeat_interleave(torch.arange(len(contexts), device=device),
                                       torch.tensor(ns, device=device))
        cache.batch_select_indices(rows)
        logits, mask = logits[rows], mask[rows]
        next_pos = pos_last[rows] + 1
        total = rows.numel()

        tokens = torch.full((total, max_new), self.pad_id, dtype=torch.long, device=device)
        lengths = torch.full((total,), max_new, dtype=torch.long, device=device)
        stopped = torch.zeros(total, dtype=torch.bool, device=device)
        seq = torch.arange(total, device=device)          # batch row -> sequence index
        live = torch.ones(total, dtype=torch.bool, device=device)  # per batch row

        for t in range(max_new):
            tok = _sample(logits, params, gen)
            tokens[seq, t] = tok
            hit = live & torch.isin(tok, stop_ids)
            if bool(hit.any()):
                lengths[seq[hit]] = t + 1
                stopped[seq[hit]] = True
                live &= ~hit
            n_live = int(live.sum())
            if n_live == 0 or t + 1 == max_new:
                break
            if live.numel() - n_live >= max(1, int(self.compact_fraction * live.numel())):
                keep = live.nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                mask, next_pos, seq, tok = mask[keep], next_pos[keep], seq[keep], tok[keep]
                live = torch.ones(keep.numel(), dtype=torch.bool, device=device)
                mask = _trim_left_padding(cache, mask)
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            if step is not None:
                logits = step.step(tok, mask, next_pos, cache)
            else:
                logits = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                               past_key_values=cache, use_cache=True).logits[:, -1, :]
            next_pos = next_pos + 1

        tokens_l, lengths_l, stopped_l = tokens.tolist(), lengths.tolist(), stopped.tolist()
        comps = [self._completion(tokens_l[i][:lengths_l[i]], stopped_l[i]) for i in range(total)]
        return split_runs(comps, ns)

    def _prefill(self, contexts: list[tuple[int, ...]], device: torch.device):
        """Last-position logits of every context and one cache holding all of them, left-padded
        to the longest. Contexts are prefilled in groups of similar length (``BucketCost``
        weighs one more forward pass against padded positions), so a bucket's long prompt
        does not make every short one compute its padding through all layers; each group's
        keys/values are then copied right-aligned into the shared cache. Padding columns hold
        zeros (masked; never NaN, which a masked softmax weight of 0 would not cancel)."""
        model, lens = self.model, [len(c) for c in contexts]
        width = max(lens)
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, n in enumerate(lens):
            mask[i, width - n:] = 1
        mask = mask.to(device)
        logits, keys, values = [], None, None
        groups = (_cheapest_cuts(len(contexts), lambda i, j: self.cost.prefill(j - i, max(lens[i:j])))
                  if self.bucket else [(0, len(contexts))])
        for lo, hi in groups:
            gw = max(lens[lo:hi])
            gmask = mask[lo:hi, width - gw:]
            ids = torch.full((hi - lo, gw), self.pad_id, dtype=torch.long)
            for r, c in enumerate(contexts[lo:hi]):
                ids[r, gw - len(c):] = torch.tensor(c, dtype=torch.long)
            part = DynamicCache(config=model.config)
            logits.append(model(input_ids=ids.to(device), attention_mask=gmask,
                                position_ids=(gmask.cumsum(-1) - 1).clamp_(min=0), past_key_values=part,
                                use_cache=True, logits_to_keep=1).logits[:, -1, :])
            if keys is None:
                keys = [layer.keys.new_zeros((len(contexts), *layer.keys.shape[1:2], width, layer.keys.shape[-1]))
                        for layer in part.layers]
                values = [k.clone() for k in keys]
            for k, v, layer in zip(keys, values, part.layers):
                k[lo:hi, :, width - gw:] = layer.keys
                v[lo:hi, :, width - gw:] = layer.values
        cache = DynamicCache(config=model.config)
        cache.layers = [_ReservedLayer() for _ in keys]
        for layer, k, v in zip(cache.layers, keys, values):
            layer.update(k, v)
        return torch.cat(logits), cache, mask, mask.sum(-1) - 1

    def _completion(self, ids: list[int], stopped: bool) -> Completion:
        return Completion(token_ids=tuple(ids), text=self.tokenizer.decode(ids, skip_special_tokens=True),
                          finish_reason="stop" if stopped else "length")


def _cheapest_cuts(n: int, cost) -> list[tuple[int, int]]:
    """Contiguous ranges [i, j) covering range(n) with the least total ``cost(i, j)`` (a
    dynamic programme over the last cut). ``cost`` returns None when [i, j) is too big, and
    then so is every wider range ending at j."""
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j - 1, -1, -1):
            c = cost(i, j)
            if c is None:
                break
            if best[i] + c < best[j]:
                best[j], cut[j] = best[i] + c, i
    out, j = [], n
    while j > 0:
        out.append((cut[j], j))
        j = cut[j]
    return out[::-1]


class BucketCost:
    """A rough cost model, in bytes moved, for choosing bucket and prefill-group cuts.

    A forward pass streams the weights once (plus a fixed per-layer overhead of launching
    kernels, which dominates a tiny model); a decode step also reads each row's KV cache; a
    prefill computes every padded position (~2 FLOPs per parameter per token, counted at
    ``FLOPS_PER_BYTE``, a CPU's compute / memory-bandwidth balance). Only the cuts depend
    on it; the outputs do not."""

    FLOPS_PER_BYTE = 8.0
    LAYER_OVERHEAD_BYTES = 1 << 20

    def __init__(self, model: Any):
        cfg = model.config
        params = sum(p.numel() for p in model.parameters())
        elem = next(model.parameters()).element_size()
        layers = int(cfg.num_hidden_layers)
        heads = int(cfg.num_attention_heads)
        kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
        self.step_bytes = params * elem + layers * self.LAYER_OVERHEAD_BYTES
        self.kv_bytes_per_token = layers * 2 * kv_heads * head_dim * elem
        self.prefill_bytes_per_token = 2 * params / self.FLOPS_PER_BYTE

    def prefill(self, contexts: int, width: int) -> float:
        """One forward pass over ``contexts`` rows padded to ``width``."""
        return self.step_bytes + contexts * width * self.prefill_bytes_per_token

    def bucket(self, rows: int, width: int, max_new: int) -> float:
        """Decoding ``rows`` rows padded to ``width`` for ``max_new`` steps. The prefill is left
        out: grouped by length (``HFEngine._prefill``) it costs about the contexts' own tokens
        wherever the cuts fall."""
        return max_new * (self.step_bytes + rows * (width + max_new / 2) * self.kv_bytes_per_token)


def _sample(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator) -> torch.Tensor:
    """Greedy at temperature 0; otherwise temperature + nucleus (top-p) sampling."""
    if params.temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # drop a token when the mass strictly before it already reaches top_p (the top one always stays)
        drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= params.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return _categorical(probs, gen)


def _categorical(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One draw per row with probability proportional to ``probs``: the row's cumulative sum
    (float64) inverted at one uniform. ``torch.multinomial`` draws an exponential for every
    vocabulary entry instead, which on a 49K vocabulary costs more than a decode step's
    attention (``bench/engine_throughput.py --profile``: ``aten::exponential_``)."""
    cdf = probs.double().cumsum(dim=-1)
    u = torch.rand((probs.shape[0], 1), generator=gen, dtype=torch.float64, device=probs.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=probs.shape[-1] - 1)


def _trim_left_padding(cache: DynamicCache, mask: torch.Tensor) -> torch.Tensor:
    """Drop leading columns that no remaining row attends to (their long contexts retired).
    Positions are passed explicitly, so removing all-padding columns changes nothing."""
    used = mask.any(dim=0)
    first = int(used.long().argmax()) if bool(used.any()) else 0
    if first == 0:
        return mask
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, first:, :]
        layer.values = layer.values[:, :, first:, :]
    return mask[:, first:]


class _ReservedLayer(DynamicLayer):
    """A DynamicLayer whose keys/values live in buffers with spare capacity along the
    sequence axis: ``update`` writes the new step in place and returns views, growing the
    buffers geometrically when full (amortised O(1) per token instead of a full copy).
    Anything that assigns ``keys``/``values`` (batch selection, our left-padding trim)
    replaces that buffer, which is then re-reserved on the next update."""

    def __init__(self, config=None):
        self._k = self._v = None
        self._nk = self._nv = 0
        super().__init__(config)

    @staticmethod
    def _view(buf, n):
        return buf if buf is None or buf.dim() != 4 else buf[:, :, :n]

    @property
    def keys(self):
        return self._view(self._k, self._nk)

    @keys.setter
    def keys(self, t):
        self._k, self._nk = t, (t.shape[-2] if t is not None and t.dim() == 4 else 0)

    @property
    def values(self):
        return self._view(self._v, self._nv)

    @values.setter
    def values(self, t):
        self._v, self._nv = t, (t.shape[-2] if t is not None and t.dim() == 4 else 0)

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._k, self._nk = self._append(self._k, self._nk, key_states)
        self._v, self._nv = self._append(self._v, self._nv, value_states)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        # a new buffer of the same capacity, with only the used positions of the kept rows
        # copied (the spare capacity survives a compaction and costs no copy)
        if self._nk:
            self._k, self._v = _select_rows(self._k, self._nk, indices), _select_rows(self._v, self._nv, indices)

    @staticmethod
    def _append(buf, n, new):
        add = new.shape[-2]
        if buf is None or buf.dim() != 4 or buf.shape[-2] < n + add or buf.shape[0] != new.shape[0]:
            grown = new.new_empty((*new.shape[:2], max(2 * (n + add), n + add + 32), new.shape[-1]))
            if n:
                grown[:, :, :n] = buf[:, :, :n]
            buf = grown
        buf[:, :, n:n + add] = new
        return buf, n + add


def _select_rows(buf: torch.Tensor, n: int, rows: torch.Tensor) -> torch.Tensor:
    out = buf.new_empty((rows.numel(), *buf.shape[1:]))
    torch.index_select(buf[:, :, :n], 0, rows, out=out[:, :, :n])
    return out
