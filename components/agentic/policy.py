"""The tiny policy for text environments: the same ~0.8M-parameter Qwen2 model as the math demo
(``components.policy``), with a character vocabulary for board text and action words.

Character-level for the same reason as the math demo (one token per board cell and letter);
the vocabulary is ASCII letters, digits, punctuation, space and newline plus the byte symbols
of the non-ASCII board symbols (Sokoban's box-on-target ``√`` is three byte tokens).
"""
from __future__ import annotations

import string

from transformers import PreTrainedTokenizerFast

from components.policy.tokenizer import MAX_POSITIONS, tokenizer_of_chars

AGENT_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n" + "\u221a"


def build_agent_tokenizer(chars: str = AGENT_CHARS, max_positions: int | None = None
                          ) -> PreTrainedTokenizerFast:
    """Character tokenizer (``components.policy.build_tokenizer``'s pipeline): ``<pad>`` id 0,
    ``<eos>``, ``<unk>``, then one id per byte symbol of ``chars``."""
    return tokenizer_of_chars(chars, max_positions or MAX_POSITIONS)
