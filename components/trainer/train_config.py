"""The trainers' config (the ``train`` stage's params add the stage's own fields). Light: no torch."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from components.budget import DEFAULT_RESPONSE_TOKENS
from components.error_text import FieldError, validation_problem
from components.stages.base import StageParams


class TrainConfig(StageParams):
    """Everything one embedded training run needs (also the ``train`` stage's params)."""

    method: str = "grpo"
    method_config: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    steps: int = Field(60, ge=1)
    batch_prompts: int = Field(16, ge=1)
    # AdamW moves every parameter by about lr per step whatever the gradient's size: at ten
    # times this, one update of the demo's small pretrained policy lowers the log-prob of every
    # sampled response, positive-advantage ones included, instead of moving them apart
    lr: float = Field(2e-5, gt=0)
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = Field(DEFAULT_RESPONSE_TOKENS, ge=1)
    prompt_template: Literal["raw", "chat"] = "raw"
    adv_estimator: Literal["grpo", "drgrpo", "rloo"] = "grpo"
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                           "seq-mean-token-sum-norm"] = "seq-mean-token-mean"
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = Field(0.0, ge=0.0)
    ppo_epochs: int = Field(1, ge=1)
    micro_batch: int = Field(64, ge=1)
    ckpt_every: int = Field(10, ge=1)
    val_every: int = Field(10, ge=1)
    val_size: int = Field(64, ge=0)
    val_samples: int = Field(4, ge=1)
    grading_timeout_s: float = Field(5.0, gt=0)

    @model_validator(mode="after")
    def _method_known(self):
        check_method(self.method, self.method_config, "math")
        return self


def check_method(method: str, config: dict[str, Any], task: str) -> None:
    """Refuse a method that is unknown or does not apply to ``task``, or a bad field of its config."""
    from components.methods.registry import method_config

    try:
        method_config(method, config, task)
    except KeyError as e:
        raise FieldError("method", e.args[0]) from None
    except ValidationError as e:
        field, problem = validation_problem(e, unknown="unknown parameter")
        raise FieldError(f"method_config.{field}", f"{problem} (method {method})") from None


def train_config_of(params: StageParams) -> TrainConfig:
    """The trainers' part of the ``train`` stage's params (both backends): every
    ``TrainConfig`` field; the stage's own fields (backend, threads, verl's resources) stay out."""
    return TrainConfig(**params.model_dump(include=set(TrainConfig.model_fields)))
