"""Settings of an episodic training run (also the agentic ``train`` stage's params). Light: no torch.

Defaults are verl-agent's GiGPO Sokoban settings where they apply (``docs/methods.md`` §11:
group n = 8 in the method config, gamma 0.95, step weight 1, ``mean_norm``, invalid-action
penalty in the environment); the learning rate, batch of map seeds and update count are the
embedded regime's (a 0.8M-parameter policy on 2 CPU cores), not the paper's.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from components.stages.base import StageParams
from components.trainer.train_config import check_method


class EpisodeTrainConfig(StageParams):
    task: Literal["agentic"] = "agentic"
    method: str = "grpo"
    method_config: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    steps: int = Field(20, ge=1)
    batch_seeds: int = Field(4, ge=1, description="map seeds (groups) per update")
    lr: float = Field(1e-4, gt=0)
    grad_clip: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = Field(8, ge=1, description="tokens per turn (one action word + EOS)")
    prompt_template: Literal["raw", "chat"] = "raw"
    # gigpo: A = A^E + step_weight * A^S; "episode": A^E only (GRPO on episode returns)
    adv_estimator: Literal["gigpo", "episode"] = "gigpo"
    gamma: float = Field(0.95, ge=0, le=1)
    step_weight: float = 1.0
    gigpo_mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    episode_stats: Literal["steps", "episodes"] = "steps"
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean"] = "token-mean"
    micro_batch: int = Field(64, ge=1)
    ckpt_every: int = Field(10, ge=1)
    val_every: int = Field(10, ge=1)
    val_seeds: int = Field(32, ge=0, description="held-out map seeds for validation (1 episode each)")

    @model_validator(mode="after")
    def _method_known(self):
        check_method(self.method, self.method_config, "agentic")
        return self
