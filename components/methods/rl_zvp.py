"""RL-ZVP (Le et al., ICLR 2026, arXiv 2509.21880): learn from zero-variance prompts.

Allocation is GRPO's (uniform ``n``); the difference is the advantage of groups whose
rewards are all equal, which GRPO zeroes: each token of such a group gets an
entropy-shaped advantage (paper section 3, alpha = 0.1):

    all correct:  A_t = alpha * H_t
    all wrong:    A_t = -alpha * (max_k H_k - H_t)   (max over the response's own tokens)

with H_t the detached full-vocabulary entropy of the current policy at token t
(``components.algos.advantages.zvp_token_advantages``). The trainer asks for it through the
method's ``token_advantage_groups`` / ``token_advantages`` hooks inside its loss; the verl
backend calls ``token_advantages`` with the entropy of its old log-prob pass, before the update
(``components/trainer/verl/advantages.py``). The
paper's other settings (clip 0.2/0.28, token-level loss, no KL) are trainer settings of the
sweep.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from pydantic import Field

from components.methods.base import Group
from components.methods.grpo import GRPO, GRPOConfig

if TYPE_CHECKING:
    import torch


class RLZVPConfig(GRPOConfig):
    alpha: float = Field(0.1, gt=0, description="entropy scale of zero-variance token advantages")


class RLZVP(GRPO):
    name = "rl_zvp"
    Config = RLZVPConfig
    per_token_advantages = True

    def token_advantage_groups(self, groups: Sequence[Group]) -> list[bool]:
        """The zero-variance groups (one distinct reward; a single sample counts) of RL samples."""
        return [not g.supervised and len(set(g.rewards)) == 1 for g in groups]

    def token_advantages(self, entropy: torch.Tensor, mask: torch.Tensor,
                         rewards: torch.Tensor, rows: torch.Tensor | None = None,
                         logp: torch.Tensor | None = None) -> torch.Tensor:
        from components.algos.advantages import zvp_token_advantages

        return zvp_token_advantages(entropy, mask, rewards > 0, self.config.alpha)
