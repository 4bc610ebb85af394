"""One decode step of a Llama-family model (Llama, Qwen2) as direct tensor operations.

On a small model a decode step through ``model(...)`` is mostly Python: transformers builds a
4-D mask from the 2-D one, resolves the attention and mask interfaces, and every decoder layer,
attention, MLP and norm is a module call with keyword plumbing and output wrappers (the tiny
policy: 3 layers of width 128, where those calls cost as much as the arithmetic;
``bench/engine_throughput.py --profile``). ``DecodeStep`` computes the same step with the same
operations in the same order -- the model's own parameters, its rotary embedding module, the
engine's attention and each linear layer's current ``forward`` (the oneDNN one inside an engine
call) -- and nothing else, so its logits equal ``model(...)``'s bit for bit
(``tests/engine/test_decode_step.py``). The projections are not stacked into one product:
oneDNN picks another kernel for the wider matrix and the sums round differently.

It applies to the architectures it mirrors and falls back to ``model(...)`` for anything else
(``DecodeStep.of`` returns None): another model type, sliding-window layers, an activation
other than SiLU, attention other than the engine's, and a model with forward hooks on any
module (it calls each layer's ``forward`` directly, which would skip them).
"""
from __future__ import annotations

from typing import Any

import torch

from components.engine.attention import ENGINE_ATTENTION, gqa_attention

# the decoder layer, attention and MLP code DecodeStep mirrors (transformers' modeling_llama /
# modeling_qwen2: pre-norm RMSNorm, rotary q/k, o_proj, gated MLP)
ARCHITECTURES = {"LlamaForCausalLM", "Qwen2ForCausalLM"}


class DecodeStep:
    """``step(tok, mask, positions, cache)`` -> last-position logits, as ``model(input_ids=tok[:, None],
    attention_mask=mask, position_ids=positions[:, None], past_key_values=cache).logits[:, -1]``."""

    def __init__(self, model: Any):
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.rotary = inner.rotary_emb
        self.norm = inner.norm
        self.layers = list(inner.layers[: model.config.num_hidden_layers])
        self.lm_head = model.lm_head

    @classmethod
    def of(cls, model: Any) -> "DecodeStep | None":
        """The fast step for ``model``, or None where it would not compute what the model does."""
        cfg = model.config
        if type(model).__name__ not in ARCHITECTURES or cfg._attn_implementation != ENGINE_ATTENTION:
            return None
        if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ["full_attention"])):
            return None
        if getattr(cfg, "hidden_act", None) != "silu" or _has_hooks(model):
            return None
        return cls(model)

    def step(self, tok: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        b = tok.shape[0]
        h = self.embed[tok][:, None, :]                     # (B, 1, hidden)
        cos, sin = self.rotary(h, positions[:, None])
        cos, sin = cos[:, None], sin[:, None]               # (B, 1, 1, head_dim), broadcast over heads
        # A one-token query attends to every cached position, so the mask is the padding mask
        # alone: none when no row is padded (as transformers passes), else additive, made once
        # per step (SDPA turns a boolean mask into this one at every layer's call).
        attn_mask = None
        if not bool(mask.all()):
            attn_mask = torch.zeros(mask.shape, dtype=h.dtype, device=h.device).masked_fill_(mask == 0, float("-inf"))
            attn_mask = attn_mask[:, None, None, :]
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = _rms(layer.input_layernorm, h)
            d = attn.head_dim
            q = attn.q_proj.forward(x).view(b, 1, -1, d).transpose(1, 2)
            k = attn.k_proj.forward(x).view(b, 1, -1, d).transpose(1, 2)
            v = attn.v_proj.forward(x).view(b, 1, -1, d).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            k, v = cache.layers[i].update(k, v)
            out, _ = gqa_attention(attn, q, k, v, attn_mask, scaling=attn.scaling)
            h = h + attn.o_proj.forward(out.reshape(b, 1, -1).contiguous())
            x = _rms(layer.post_attention_layernorm, h)
            mlp = layer.mlp
            h = h + mlp.down_proj.forward(torch.nn.functional.silu(mlp.gate_proj.forward(x)) * mlp.up_proj.forward(x))
        return self.lm_head.forward(_rms(self.norm, h))[:, -1, :]


def _has_hooks(model: torch.nn.Module) -> bool:
    from torch.nn.modules import module as nn_module

    if nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def _rms(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The RMSNorm of modeling_llama / modeling_qwen2, with ``norm``'s weight and epsilon."""
    dtype = x.dtype
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * x32.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
