"""The tiny policy's tokenizer: one token per character.

Why character-level: the synthetic arithmetic task (``components.data.synthetic``) is
about digits; one token per character makes every step boundary a token boundary, so
prefixes cut at ``parse_steps`` offsets tokenize to prefixes of the full trace.

How: a byte-level BPE with an empty merge list, so every character is exactly one token.
Why not a WordLevel model: transformers 5 ignores tokenizer_config.json for a ``qwen2``
model directory and rebuilds the tokenizer as ``Qwen2Tokenizer`` (byte-level BPE from the
saved vocab + merges, Qwen2's pre-tokenizer regex, NFC). By using that very pipeline with no
merges, the tokenizer.json loaded as-is (``PreTrainedTokenizerFast``, vLLM with transformers
4) and the rebuilt Qwen2Tokenizer (``AutoTokenizer``, verl/vLLM with transformers 5) encode
and decode identically. Only out-of-vocabulary characters differ: ours maps them to <unk>,
Qwen2Tokenizer drops them.
"""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
# Everything the synthetic task writes: digits, operators, the words "Compute" and
# "boxed", \boxed{...} punctuation, and newline (harmless; lets a chat-ish prompt through).
CHARS = "0123456789+-=. " + "".join(sorted(set("Compute" + "boxed"))) + "\\{}\n"
# the longest sequence the tiny model takes (``TinyPolicyConfig.max_positions``)
MAX_POSITIONS = 256
# Qwen2's pre-tokenizer split, so that a rebuilt Qwen2Tokenizer splits text as we do
QWEN2_PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                           r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Character tokenizer; ``<pad>`` is id 0, then ``<eos>``, ``<unk>``, then ``CHARS``."""
    return tokenizer_of_chars(CHARS, MAX_POSITIONS)


def tokenizer_of_chars(chars: str, max_positions: int) -> PreTrainedTokenizerFast:
    """A BPE tokenizer with no merges over the byte-level symbols of ``chars`` (space -> 'Ġ',
    newline -> 'Ċ', a non-ASCII character one symbol per UTF-8 byte; ids 3.. in order, repeats
    dropped) behind Qwen2's pre-tokenizer split: ``<pad>`` 0, ``<eos>`` 1, ``<unk>`` 2."""
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    for ch in chars:
        for sym in byte_level.pre_tokenize_str(ch)[0][0]:
            vocab.setdefault(sym, len(vocab))
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
                                   model_max_length=max_positions)


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
