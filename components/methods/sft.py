"""SFT on the expert traces used to seed VSR (the VSR paper's SFT baseline).

No generation: each step takes the batch's prompts that have an expert trace and
returns one supervised group per prompt (the trace + EOS as the target). The trainer
applies token-level NLL on the target tokens only (the prompt is context).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from components.data.schema import Problem
from components.methods.base import Group, MethodConfig, RolloutContext, Stateless


def target_ids(trace: str, tokenizer) -> tuple[int, ...]:
    """What SFT trains on after the prompt: the trace's tokens, then EOS (every backend's)."""
    return tuple(tokenizer.encode(trace, add_special_tokens=False)) + (tokenizer.eos_token_id,)


class SFTConfig(MethodConfig):
    pass


class SFT(Stateless):
    name = "sft"
    Config = SFTConfig

    def __init__(self, config: SFTConfig):
        super().__init__(config)
        self.traces: dict[str, str] = {}
        self.tokenizer = None

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        self.traces = dict(resources.get("expert_traces") or {})
        self.tokenizer = resources.get("tokenizer")
        if not self.traces:
            raise ValueError("sft: no expert traces were provided (seed_prefixes produced an empty SFT set)")

    def training_problems(self, problems: Sequence[Problem]) -> list[Problem]:
        """SFT trains on exactly the prompts that have an expert trace."""
        return [p for p in problems if p.uid in self.traces]

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        tok = ctx.engine.tokenizer
        groups = []
        for p in batch:
            trace = self.traces.get(p.uid)
            if trace is None:
                continue
            ids = ctx.encode_prompt(p)
            target = target_ids(trace, tok)
            groups.append(Group(uid=p.uid, problem_uid=p.uid, answer=p.answer, context_ids=ids,
                                prompt_len=len(ids), responses=[target], texts=[trace], rewards=[1.0],
                                reasons=["expert"], finish_reasons=["stop"], supervised=True))
        return groups

    def rollouts_per_step(self, batch_size: int) -> int:
        return 0
