"""How a problem becomes the model's context. ``raw``: the problem text as is (the tiny
char-level policy); ``chat``: the tokenizer's chat template with the papers' instruction."""
from __future__ import annotations

from components.data.schema import Problem

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def render_prompt(problem: Problem, tokenizer, template: str = "raw") -> str:
    if template == "raw":
        return problem.prompt
    if template == "chat":
        msgs = [{"role": "user", "content": f"{problem.prompt}\n{INSTRUCTION}"}]
        return tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    raise ValueError(f"unknown prompt template '{template}' (raw | chat)")


def encode_prompt(problem: Problem, tokenizer, template: str = "raw") -> tuple[int, ...]:
    text = render_prompt(problem, tokenizer, template)
    return tuple(tokenizer.encode(text, add_special_tokens=False))
