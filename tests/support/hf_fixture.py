"""A stand-in *pretrained* checkpoint in the real HF layout, built offline: a 1-layer Qwen2
with a byte-level BPE tokenizer (Qwen2's pre-tokenizer, no merges), the ChatML chat template
and Qwen's special tokens. ``AutoTokenizer`` loads it as ``Qwen2Tokenizer``, exactly as it
loads Qwen2.5-7B-Instruct, so the stages' real-model path (resolve, AutoTokenizer, chat
template, several stop ids) runs here without the hub. Random weights: the tests check
mechanics, not accuracy."""
from __future__ import annotations

from pathlib import Path

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_chat_model_dir(path: Path, seed: int = 0) -> Path:
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from components.policy.model import quiet_hf
    from components.policy.tokenizer import QWEN2_PRETOKENIZE_REGEX

    quiet_hf()
    vocab = {s: i for i, s in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHATML)
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                      eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    model = Qwen2ForCausalLM(cfg)
    # like Qwen2.5-Instruct: a turn ends on <|im_end|> or <|endoftext|>
    model.generation_config.eos_token_id = [fast.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    fast.save_pretrained(str(path))
    return path
