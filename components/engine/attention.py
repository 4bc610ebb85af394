"""Grouped-query attention on the KV cache as it is: the engine's own attention implementation.

transformers' ``sdpa`` attention repeats every key/value head ``num_key_value_groups`` times
(``repeat_kv``) whenever an attention mask is passed -- and a batch of left-padded contexts
always passes one. On a model whose KV heads each serve several query heads (SmolLM2-135M:
9 query heads over 3 KV heads, 30 layers) that copies the whole cache of every layer at every
decode step, which profiles as the largest cost of the decode loop on CPU.

``gqa_attention`` avoids the copy:

- decode (one query token): the query heads of a group are folded into the query length,
  (B, Hq, 1, D) -> (B, Hkv, G, D), a view; SDPA then attends G "positions" of one KV head to
  its keys. The padding mask (B, 1, 1, S) broadcasts over heads and those G rows unchanged,
  so masking is exactly the ``sdpa`` one.
- prefill (many query tokens): SDPA's own ``enable_gqa`` with the same mask (done once per
  context, so a kernel's internal expansion there costs little).

It is registered under ``ENGINE_ATTENTION`` with transformers' ``sdpa`` mask builder, and
``engine_attention(model)`` switches a model to it for the duration of an engine call only:
the trainer's forward/backward keeps the implementation the model was loaded with.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ENGINE_ATTENTION = "rlvr_gqa"
# implementations the engine's attention computes identically (same masks, same softmax);
# anything else (flash_attention_2 on a GPU, flex, paged) is left as the model has it
REPLACEABLE = ("sdpa", "eager")


def gqa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                  is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """(B, L, Hq, D) attention output for query (B, Hq, L, D) and key/value (B, Hkv, S, D)."""
    b, hq, q_len, d = query.shape
    hkv = key.shape[1]
    groups = hq // hkv
    if hq != groups * hkv:
        raise ValueError(f"{hq} query heads do not split into groups over {hkv} key/value heads")
    if dropout:
        raise ValueError("the engine's attention is for inference: dropout must be 0")
    for name in ("softcap", "s_aux"):     # logit soft-capping, attention sinks: not computed here
        if kwargs.get(name) is not None:
            raise ValueError(f"the engine's attention does not implement {name}; load the model with its own")
    if q_len == 1 and groups > 1:
        q = query.reshape(b, hkv, groups, d)       # head h = kv * groups + g, as repeat_kv orders them
        out = F.scaled_dot_product_attention(q, key, value, attn_mask=attention_mask, scale=scaling)
        return out.reshape(b, 1, hq, d), None       # (B, Hkv, G, D) -> (B, L=1, Hq, D)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = q_len > 1 and attention_mask is None and causal
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                         is_causal=causal, enable_gqa=groups > 1)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ENGINE_ATTENTION, gqa_attention)
AttentionMaskInterface.register(ENGINE_ATTENTION, sdpa_mask)


@contextmanager
def engine_attention(model: torch.nn.Module) -> Iterator[str]:
    """Run ``model`` with ``gqa_attention`` inside the block (when it uses sdpa or eager);
    its own implementation is restored on exit, also after an error. Yields the one in use."""
    config = model.config
    before = config._attn_implementation
    if before not in REPLACEABLE:
        yield before
        return
    config._attn_implementation = ENGINE_ATTENTION
    try:
        yield ENGINE_ATTENTION
    finally:
        config._attn_implementation = before
