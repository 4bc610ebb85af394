"""The tiny policy's model: a ~0.8M-parameter Qwen2, built, saved and loaded as an ordinary
Hugging Face checkpoint.

Why Qwen2 and ``save_pretrained``: the same directory must load in plain transformers
(CPU engine, trainer) and, on a GPU, in vLLM/verl, so the demo model is an ordinary HF
checkpoint rather than a custom module.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM)

from components.hf_models import load_tokenizer_any
from components.policy.tokenizer import MAX_POSITIONS, save_tokenizer


@dataclass(frozen=True)
class TinyPolicyConfig:
    layers: int = 3
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 4
    ffn: int = 512
    max_positions: int = MAX_POSITIONS
    tie_embeddings: bool = True
    rope_theta: float | None = None   # None: the transformers default for Qwen2


def build_policy(cfg: TinyPolicyConfig, tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> Qwen2ForCausalLM:
    """A freshly initialised Qwen2ForCausalLM. The init is seeded inside ``fork_rng`` so
    building a model never shifts the caller's global RNG stream."""
    kw: dict[str, Any] = {}
    if cfg.rope_theta is not None:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": float(cfg.rope_theta)}
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden, intermediate_size=cfg.ffn,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        max_position_embeddings=cfg.max_positions, tie_word_embeddings=cfg.tie_embeddings,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        # no BOS in the vocabulary: prompts start with their first character; EOS doubles
        # as BOS for anything that insists on one (generate() with no input)
        bos_token_id=tokenizer.eos_token_id, use_cache=True, **kw)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, max_new_tokens=cfg.max_positions)
    return model


def quiet_hf() -> None:
    """transformers' per-call "Loading weights" / "Writing model shards" bars are noise in
    stage logs; our own progress lines say what is happening."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def save_policy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, path: str | Path) -> Path:
    quiet_hf()
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path), safe_serialization=True)
    save_tokenizer(tokenizer, path)
    return path


def load_policy(path: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """(model, tokenizer) from a directory of HF files: the tiny policy or any pretrained
    causal LM (its tokenizer through ``AutoTokenizer``, see components.hf_models)."""
    quiet_hf()
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(device)
    model.eval()
    return model, load_tokenizer_any(path)
