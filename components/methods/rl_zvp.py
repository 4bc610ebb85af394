"""RL-ZVP (Le et al., ICLR 2026, arXiv 2509.21880): learn from zero-variance prompts.

Allocation is GRPO's (uniform ``n``); the difference is the advantage of groups whose
rewards are all equal, which GRPO zeroes: each token gets an entropy-shaped advantage
(``components.algos.advantages.zvp_token_advantages``; alpha = 0.1 per the paper).
The trainer applies it when the method exposes ``zvp_alpha``. The paper's other
settings (clip 0.2/0.28, token-level loss, no KL) are trainer settings of the sweep.
"""
from __future__ import annotations

from pydantic import Field

from components.methods.grpo import GRPO, GRPOConfig


class RLZVPConfig(GRPOConfig):
    alpha: float = Field(0.1, gt=0, description="entropy scale of zero-variance token advantages")


class RLZVP(GRPO):
    name = "rl_zvp"
    Config = RLZVPConfig

    @property
    def zvp_alpha(self) -> float:
        return self.config.alpha
