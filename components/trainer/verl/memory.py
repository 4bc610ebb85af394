"""Per-GPU memory arithmetic of one verl train cell: does it fit the GPUs it declares?

Pure arithmetic (no torch, no verl import): sweep validation runs it at DAG-parse time and the
k8s dry run prints it. The model is verl's hybrid engine with FSDP over ``N = n_gpus_per_node x
nnodes`` GPUs and a colocated vLLM rollout of tensor-parallel size ``tp``:

* actor states (FSDP, sharded over N): fp32 parameters 4 B, fp32 gradients 4 B, AdamW's two fp32
  moments 8 B a parameter; the reference policy (only with a KL term: ``kl_coef > 0`` or verl's
  ``use_kl_loss`` set in ``verl_overrides``) bf16, 2 B a parameter.
* rollout phase: vLLM claims ``gpu_memory_utilization x G`` at start-up beside what the actor
  keeps resident (parameters unless ``param_offload``, optimizer unless ``optimizer_offload``,
  the reference unless its ``param_offload``; gradients are freed after each update). Inside its
  share: bf16 weights ``2P / tp`` and the KV cache, ``2 x layers x kv_heads x head_dim x 2 B`` a
  token (split over tp); a cell must hold at least one sequence of ``max_prompt_length +
  max_new_tokens`` tokens (an agentic cell's ``layout: serialized`` row: ``max_prompt_length +
  max_episode_tokens``, the whole episode one response).
* update phase (vLLM asleep: its weights and KV cache released): actor states + the reference +
  activations of one micro-batch: with gradient checkpointing one bf16 hidden state a layer a
  token plus one layer recomputed; without it every layer's (``8h + 4 x intermediate``) bf16
  values a token; the logits at 6 B a token a vocabulary entry (bf16 logits, fp32 log-softmax).
  A micro-batch holds ``micro_batch x (prompt + response)`` tokens, or ``ppo_max_token_len_per_gpu``
  with ``use_dynamic_bsz``.
* plus a fixed runtime reserve (CUDA context, NCCL buffers, allocator fragmentation).

It is an estimate from first principles (it ignores vLLM's CUDA graphs and the allocator's
exact behaviour), made to catch the cell that cannot run, not to tune the last gigabyte.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 2 ** 30
RUNTIME_RESERVE_GIB = 3.0


@dataclass(frozen=True)
class Arch:
    """What the arithmetic needs of a decoder (the fields of its HF ``config.json``)."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool = False

    def params(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        layer = attn + 3 * h * self.intermediate + 2 * h
        return self.layers * layer + self.vocab * h * (1 if self.tied else 2) + h

    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


# From each model's config.json on the Hugging Face hub (hidden_size, num_hidden_layers,
# num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, tie_word_embeddings);
# an Instruct model has its base model's architecture.
_QWEN25 = dict(head_dim=128, qkv_bias=True)
KNOWN: dict[str, Arch] = {
    "Qwen/Qwen2.5-1.5B": Arch(1536, 28, 12, 2, intermediate=8960, vocab=151936, tied=True, **_QWEN25),
    "Qwen/Qwen2.5-3B": Arch(2048, 36, 16, 2, intermediate=11008, vocab=151936, tied=True, **_QWEN25),
    "Qwen/Qwen2.5-7B": Arch(3584, 28, 28, 4, intermediate=18944, vocab=152064, tied=False, **_QWEN25),
    "Qwen/Qwen2.5-Math-1.5B": Arch(1536, 28, 12, 2, intermediate=8960, vocab=151936, tied=True, **_QWEN25),
    "meta-llama/Llama-3.2-3B": Arch(3072, 28, 24, 8, head_dim=128, intermediate=8192, vocab=128256, tied=True),
    "microsoft/Phi-4-mini-instruct": Arch(3072, 32, 24, 8, head_dim=128, intermediate=8192, vocab=200064,
                                          tied=True),
}


def arch_of(model: str) -> Arch | None:
    """The architecture of a hub id (an ``-Instruct`` id as its base) or of a local HF directory;
    None when neither is known here."""
    for name in (model, model.removesuffix("-Instruct")):
        if name in KNOWN:
            return KNOWN[name]
    cfg = Path(model).expanduser() / "config.json"
    if not cfg.is_file():
        return None
    c = json.loads(cfg.read_text())
    heads = c["num_attention_heads"]
    return Arch(c["hidden_size"], c["num_hidden_layers"], heads, c.get("num_key_value_heads", heads),
                c.get("head_dim") or c["hidden_size"] // heads, c["intermediate_size"], c["vocab_size"],
                bool(c.get("tie_word_embeddings", False)), qkv_bias=c.get("model_type") == "qwen2")


# verl 0.9.1's ppo_trainer.yaml defaults for the knobs below (tests/test_verl_memory.py checks
# them against the composed config, so a verl upgrade that moves one fails there)
VERL_DEFAULTS: dict[str, Any] = {
    "actor_rollout_ref.actor.fsdp_config.param_offload": False,
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
    "actor_rollout_ref.ref.fsdp_config.param_offload": False,
    "actor_rollout_ref.actor.use_dynamic_bsz": False,
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 16384,
    "actor_rollout_ref.actor.use_kl_loss": False,
    "actor_rollout_ref.model.enable_gradient_checkpointing": True,
}


def _value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(low)
    except ValueError:
        return text.strip()


def knobs(params: dict[str, Any]) -> dict[str, Any]:
    """The memory knobs of merged train params: verl's defaults, then ``verl_overrides``."""
    out = dict(VERL_DEFAULTS)
    for ov in params.get("verl_overrides") or ():
        key, _, val = str(ov).lstrip("+").partition("=")
        if key in out:
            out[key] = _value(val)
    return out


def estimate(model: str, params: dict[str, Any], gpu_memory_gib: float) -> dict[str, Any] | None:
    """Per-GPU GiB of one train cell (``params``: the sweep's merged train params for it), the
    checks and a ``refusal`` (None when it fits); None when the model's architecture is unknown."""
    a = arch_of(model)
    if a is None:
        return None
    k = knobs(params)
    n = int(params.get("n_gpus_per_node", 1)) * int(params.get("nnodes", 1))
    tp = int(params.get("rollout_tp", 1))
    util = float(params.get("gpu_memory_utilization", 0.5))
    # the train stage's defaults: layout turns, max_episode_tokens 4096, max_new_tokens 128
    serialized = params.get("task") == "agentic" and params.get("layout", "turns") == "serialized"
    response = params.get("max_episode_tokens", 4096) if serialized else params.get("max_new_tokens", 128)
    seq = int(params.get("max_prompt_length", 512)) + int(response)
    micro = int(params.get("micro_batch", 1))
    p = a.params()
    use_ref = float(params.get("kl_coef") or 0.0) > 0 or bool(k["actor_rollout_ref.actor.use_kl_loss"])
    g = float(gpu_memory_gib)
    gib = lambda b: b / GIB  # noqa: E731

    params_gib, grads_gib, optim_gib = gib(4 * p / n), gib(4 * p / n), gib(8 * p / n)
    ref_gib = gib(2 * p / n) if use_ref else 0.0
    resident = (0 if k["actor_rollout_ref.actor.fsdp_config.param_offload"] else params_gib) + \
        (0 if k["actor_rollout_ref.actor.fsdp_config.optimizer_offload"] else optim_gib) + \
        (0 if k["actor_rollout_ref.ref.fsdp_config.param_offload"] else ref_gib)
    vllm_gib = util * g
    rollout_weights = gib(2 * p / tp)
    kv_gib = vllm_gib - rollout_weights
    seq_kv_gib = gib(seq * a.kv_bytes_per_token() / tp)
    dyn = bool(k["actor_rollout_ref.actor.use_dynamic_bsz"])
    tokens = int(k["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"]) if dyn else micro * seq
    if k["actor_rollout_ref.model.enable_gradient_checkpointing"]:
        act = gib(tokens * 2 * (a.layers * a.hidden + 8 * a.hidden + 4 * a.intermediate))
    else:
        act = gib(tokens * 2 * a.layers * (8 * a.hidden + 4 * a.intermediate))
    logits = gib(tokens * a.vocab * 6)
    update = params_gib + grads_gib + optim_gib + ref_gib + act + logits + RUNTIME_RESERVE_GIB
    rollout = resident + vllm_gib + RUNTIME_RESERVE_GIB
    out = {"model": model, "params_b": round(p / 1e9, 3), "gpus": n, "gpu_gib": g, "rollout_tp": tp,
           "seq_tokens": seq, "micro_tokens": tokens,
           "gib": {"actor_params": params_gib, "actor_grads": grads_gib, "optimizer": optim_gib, "ref": ref_gib,
                   "activations": act, "logits": logits, "vllm_share": vllm_gib, "vllm_weights": rollout_weights,
                   "kv_cache": kv_gib, "rollout_peak": rollout, "update_peak": update},
           "concurrent_full_sequences": int(kv_gib // seq_kv_gib) if kv_gib > 0 else 0}
    out["gib"] = {key: round(v, 2) for key, v in out["gib"].items()}
    out["refusal"] = _refusal(out, k, dyn, micro)
    return out


def _refusal(e: dict, k: dict, dyn: bool, micro: int) -> str | None:
    m, g = e["gib"], e["gpu_gib"]
    if m["update_peak"] > g:
        batch = f"ppo_max_token_len_per_gpu {e['micro_tokens']}" if dyn else \
            f"micro_batch {micro} x {e['seq_tokens']} tokens"
        return (f"update needs {m['update_peak']:.1f} GiB a GPU (logits {m['logits']:.1f}, optimizer "
                f"{m['optimizer']:.1f}) > {g:g} GiB at {batch}: lower micro_batch, set "
                "actor_rollout_ref.actor.use_dynamic_bsz=true with a smaller ppo_max_token_len_per_gpu, or add GPUs")
    if m["rollout_peak"] > g:
        return (f"rollout needs {m['rollout_peak']:.1f} GiB a GPU (actor resident "
                f"{m['rollout_peak'] - m['vllm_share'] - RUNTIME_RESERVE_GIB:.1f} + vLLM share "
                f"{m['vllm_share']:.1f}) > {g:g} GiB: lower gpu_memory_utilization or offload "
                "(actor_rollout_ref.actor.fsdp_config.param_offload / optimizer_offload)")
    if e["concurrent_full_sequences"] < 1:
        return (f"vLLM's share {m['vllm_share']:.1f} GiB holds its weights ({m['vllm_weights']:.1f} GiB) but not one "
                f"{e['seq_tokens']}-token sequence's KV cache: raise gpu_memory_utilization or rollout_tp")
    return None


def line(e: dict) -> str:
    """One human line of an estimate (the dry run's print)."""
    m = e["gib"]
    verdict = "fits" if e["refusal"] is None else "DOES NOT FIT"
    return (f"{e['model']}: {e['params_b']}B params on {e['gpus']} x {e['gpu_gib']:g} GiB: update peak "
            f"{m['update_peak']:.1f} GiB (actor {m['actor_params'] + m['actor_grads'] + m['optimizer']:.1f}, "
            f"ref {m['ref']:.1f}, activations {m['activations']:.1f}, logits {m['logits']:.1f}), rollout peak "
            f"{m['rollout_peak']:.1f} GiB (vLLM {m['vllm_share']:.1f}: weights {m['vllm_weights']:.1f}, KV "
            f"{m['kv_cache']:.1f} = {e['concurrent_full_sequences']} x {e['seq_tokens']} tokens): {verdict}")
