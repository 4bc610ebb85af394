"""The tiny policy of the embedded (CPU) demo: a character tokenizer, a ~0.8M-parameter
Qwen2 model, save/load, and supervised pretraining on expert traces.

Why Qwen2 and ``save_pretrained``: the same directory must load in plain transformers
(CPU engine, trainer) and, on a GPU, in vLLM/verl, so the demo model is an ordinary HF
checkpoint rather than a custom module.

Why character-level: the synthetic arithmetic task (``components.data.synthetic``) is
about digits; one token per character makes every step boundary a token boundary, so
prefixes cut at ``parse_steps`` offsets tokenize to prefixes of the full trace.
"""
from __future__ import annotations

import contextlib

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import (AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM)

from components.data.schema import Problem
from components.progress import step_progress

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
# Everything the synthetic task writes: digits, operators, the words "Compute" and
# "boxed", \boxed{...} punctuation, and newline (harmless; lets a chat-ish prompt through).
CHARS = "0123456789+-=. " + "".join(sorted(set("Compute" + "boxed"))) + "\\{}\n"


# --------------------------------------------------------------------------- tokenizer
# The tokenizer is character-level: a byte-level BPE with an empty merge list, so every
# character is exactly one token. Why not a WordLevel model: transformers 5 ignores
# tokenizer_config.json for a ``qwen2`` model directory and rebuilds the tokenizer as
# ``Qwen2Tokenizer`` (byte-level BPE from the saved vocab + merges, Qwen2's pre-tokenizer
# regex, NFC). By using that very pipeline with no merges, the tokenizer.json loaded as-is
# (``PreTrainedTokenizerFast``, vLLM with transformers 4) and the rebuilt Qwen2Tokenizer
# (``AutoTokenizer``, verl/vLLM with transformers 5) encode and decode identically.
# Only out-of-vocabulary characters differ: ours maps them to <unk>, Qwen2Tokenizer drops them.
QWEN2_PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                           r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def _byte_level(ch: str) -> str:
    """The byte-level alphabet symbol of a character (space -> 'Ġ', newline -> 'Ċ')."""
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(ch)[0][0]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Character tokenizer; ``<pad>`` is id 0, then ``<eos>``, ``<unk>``, then ``CHARS``."""
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for ch in CHARS:
        vocab.setdefault(_byte_level(ch), len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK, fuse_unk=False, byte_fallback=False,
                               continuing_subword_prefix="", end_of_word_suffix="", dropout=None))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([PAD, EOS, UNK])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK,
                                   clean_up_tokenization_spaces=False, padding_side="left",
                                   model_max_length=TinyPolicyConfig().max_positions)


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load our tokenizer from a directory, exactly as saved in tokenizer.json.
    (``AutoTokenizer`` also works on a policy directory, see above, but goes through a
    rebuild; this is the direct path.)"""
    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    if tok.pad_token_id != 0 or tok.eos_token is None:
        raise ValueError(f"{path}: not a tiny-policy tokenizer (pad={tok.pad_token!r}, eos={tok.eos_token!r})")
    return tok


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, path: str | Path) -> None:
    tokenizer.save_pretrained(str(path))
    # make the class explicit so loaders that honour tokenizer_config.json (vLLM, older
    # transformers, AutoTokenizer on a tokenizer-only directory) pick the fast wrapper
    cfg_path = Path(path) / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["clean_up_tokenization_spaces"] = False
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------- model

@dataclass(frozen=True)
class TinyPolicyConfig:
    layers: int = 3
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 4
    ffn: int = 512
    max_positions: int = 256
    tie_embeddings: bool = True
    rope_theta: float | None = None   # None: the transformers default for Qwen2

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    from components.hf_models import load_tokenizer_any

    quiet_hf()
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(device)
    model.eval()
    return model, load_tokenizer_any(path)


# --------------------------------------------------------------------------- pretraining

def encode_sft_examples(tokenizer: PreTrainedTokenizerFast, problems: Sequence[Problem]
                        ) -> list[tuple[list[int], int]]:
    """``(ids of prompt + trace + <eos>, prompt length)`` for every (problem, trace) pair."""
    out = []
    for p in problems:
        prompt_ids = tokenizer.encode(p.prompt, add_special_tokens=False)
        for trace in p.traces:
            ids = prompt_ids + tokenizer.encode(trace, add_special_tokens=False) + [tokenizer.eos_token_id]
            out.append((ids, len(prompt_ids)))
    if not out:
        raise ValueError("no (problem, trace) pairs to train on")
    return out


def collate_sft(examples: Sequence[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch; labels are -100 on prompt and padding so the loss is the
    response (trace + EOS) only."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, (ids, plen) in enumerate(examples):
        t = torch.tensor(ids, dtype=torch.long)
        input_ids[i, :len(ids)] = t
        labels[i, plen:len(ids)] = t[plen:]
        mask[i, :len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def pack_sft(examples: Sequence[tuple[list[int], int]], pad_id: int, width: int) -> dict[str, torch.Tensor]:
    """The same examples packed into rows of ``width`` tokens (first-fit decreasing).

    Why: in a 2-5-term mix the longest example is ~1.7x the mean, so right padding wastes
    ~40 % of the compute. Packed rows carry ``position_ids`` that restart at 0 for each
    example and no ``attention_mask``; transformers then builds a block-diagonal causal
    mask (``find_packed_sequence_indices``), so no example attends to another. The token
    after an example's EOS is the next example's first prompt token, whose label is -100,
    so the loss is exactly the padded batch's loss. Call the model with ``use_cache=False``
    (a cache disables the packed-sequence detection).
    """
    order = sorted(range(len(examples)), key=lambda i: -len(examples[i][0]))
    rows: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = len(examples[i][0])
        if n > width:
            raise ValueError(f"example of {n} tokens does not fit a packed row of {width}")
        j = next((j for j, r in enumerate(room) if r >= n), None)
        if j is None:
            rows.append([])
            room.append(width)
            j = len(rows) - 1
        rows[j].append(i)
        room[j] -= n
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    for r, members in enumerate(rows):
        at = 0
        for i in members:
            ids, plen = examples[i]
            t = torch.tensor(ids, dtype=torch.long)
            input_ids[r, at:at + len(ids)] = t
            labels[r, at + plen:at + len(ids)] = t[plen:]
            position_ids[r, at:at + len(ids)] = torch.arange(len(ids))
            at += len(ids)
        # the padding tail is its own "sequence" (positions from 0), unlabelled
        position_ids[r, at:] = torch.arange(width - at)
    return {"input_ids": input_ids, "position_ids": position_ids, "labels": labels}


def cosine_lr(step: int, total: int, warmup: int, base_lr: float, min_ratio: float = 0.1) -> float:
    """Linear warmup, then cosine decay to ``min_ratio * base_lr`` at ``total``."""
    if warmup > 0 and step < warmup:
        return base_lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def pretrain_policy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, problems: Sequence[Problem],
                    steps: int, batch_size: int = 128, lr: float = 3e-3, warmup: int = 50, seed: int = 0,
                    progress: bool = True, log_fn: Callable[[int, dict[str, float]], None] | None = None,
                    log_every: int = 25, weight_decay: float = 0.01, pack: bool = True) -> dict[str, float]:
    """Next-token SFT on ``prompt + trace + <eos>`` (loss on trace + EOS only).

    AdamW, warmup + cosine, grad-norm clip 1.0. Batches are drawn with a private
    ``torch.Generator(seed)`` (with replacement across steps, without within a step), so
    the run is deterministic on CPU for a given model init and seed. ``pack``: pack each
    batch into rows (``pack_sft``) instead of padding it, same loss, less compute.
    Returns the final loss (last step and mean of the last ``log_every`` steps) and timings.
    """
    examples = encode_sft_examples(tokenizer, problems)
    # rows a bit wider than the longest example: fewer, fuller rows; attention cost is small
    pack_width = max(max(len(ids) for ids, _ in examples), 160)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    was_training = model.training
    model.train()
    t0 = time.perf_counter()
    recent: list[float] = []
    last = float("nan")
    tokens = 0
    bars = step_progress("pretrain", steps) if progress else contextlib.nullcontext()
    try:
        with bars as bar:
            for step in range(steps):
                for g in opt.param_groups:
                    g["lr"] = cosine_lr(step, steps, warmup, lr)
                idx = torch.randperm(len(examples), generator=gen)[:batch_size]
                if len(idx) < batch_size:   # fewer examples than a batch: sample with replacement
                    idx = torch.randint(len(examples), (batch_size,), generator=gen)
                chosen = [examples[i] for i in idx.tolist()]
                if pack:
                    batch = pack_sft(chosen, tokenizer.pad_token_id, pack_width)
                else:
                    batch = collate_sft(chosen, tokenizer.pad_token_id)
                loss = model(**batch, use_cache=False).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                last = float(loss.detach())
                tokens += sum(len(ids) for ids, _ in chosen)
                recent = (recent + [last])[-log_every:]
                if bar is not None:
                    bar.advance(1, info=f"loss {last:.4f}")
                if log_fn is not None and ((step + 1) % log_every == 0 or step + 1 == steps):
                    log_fn(step + 1, {"loss": sum(recent) / len(recent), "lr": opt.param_groups[0]["lr"],
                                      "grad_norm": float(gnorm), "elapsed_s": time.perf_counter() - t0})
    finally:
        model.train(was_training)
    return {"final_loss": last, "final_loss_avg": sum(recent) / max(1, len(recent)), "steps": steps,
            "seconds": time.perf_counter() - t0, "tokens": tokens, "examples": len(examples)}
