"""The trainers' one config, for every task (the ``train`` stage's params add the stage's own
fields). Light: no torch.

``task`` picks the task (``components.trainer.task``): ``math`` (prompts, a grader) or
``agentic`` (map seeds of an environment, multi-turn episodes). A field the sweep leaves out
takes the task's default: the math defaults below, or, on ``agentic``, ``TASK_DEFAULTS``:
verl-agent's GiGPO Sokoban settings where they apply (``docs/methods.md`` §11: gamma 0.95,
step weight 1, ``mean_norm``), the embedded regime's learning rate, batch and update count
(a 0.8M-parameter policy on 2 CPU cores). A field of one task only (``ONLY``) set on the
other is refused by name (``components.stages.base.TaskParams``).
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator

from components.budget import DEFAULT_RESPONSE_TOKENS
from components.error_text import FieldError, validation_problem
from components.stages.base import StageParams, TaskParams

# advantage estimators (``components.algos.advantages``) per task: outcome or episode ones
ESTIMATORS = {"math": ("grpo", "drgrpo", "rloo"), "agentic": ("gigpo", "episode")}


class TrainConfig(TaskParams):
    """Everything one training run needs (also the ``train`` stage's params)."""

    TASK_DEFAULTS = {"agentic": {"steps": 20, "batch_prompts": 4, "lr": 1e-4, "max_new_tokens": 8,
                                 "adv_estimator": "gigpo", "loss_agg_mode": "token-mean", "val_size": 32}}
    RENAMED = {"batch_seeds": "batch_prompts", "val_seeds": "val_size"}

    # the fields the agentic task brought: a math run's dump (and cache key) is without them
    ADDED_FIELDS: ClassVar[tuple[str, ...]] = ("task", "gamma", "step_weight", "gigpo_mode", "episode_stats",
                                               "ppo_mini_batch_size", "keep_best", "val_temperature", "val_top_p")
    # fields that mean something on one task only: set on the other, refused
    ONLY = {"val_samples": "math", "ppo_mini_batch_size": "math", "val_temperature": "math", "val_top_p": "math", "grading_timeout_s": "math", "gamma": "agentic", "step_weight": "agentic",
            "gigpo_mode": "agentic", "episode_stats": "agentic"}

    method: str = "grpo"
    method_config: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    steps: int = Field(60, ge=1)
    batch_prompts: int = Field(16, ge=1, description="training items per update: prompts, or map seeds (agentic)")
    # AdamW moves every parameter by about lr per step whatever the gradient's size: at ten
    # times this, one update of the demo's small pretrained policy lowers the log-prob of every
    # sampled response, positive-advantage ones included, instead of moving them apart
    lr: float = Field(2e-5, gt=0)
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = Field(DEFAULT_RESPONSE_TOKENS, ge=1, description="tokens per response (agentic: per turn)")
    prompt_template: Literal["raw", "chat"] = "raw"
    adv_estimator: Literal["grpo", "drgrpo", "rloo", "gigpo", "episode"] = "grpo"
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                           "seq-mean-token-sum-norm"] = "seq-mean-token-mean"
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = Field(0.0, ge=0.0)
    ppo_epochs: int = Field(1, ge=1, description="passes over the step's rollouts (verl's ppo_epochs)")
    # verl's ppo_mini_batch_size, in prompts: the step's rollouts are split into
    # batch_prompts / ppo_mini_batch_size mini-batches, each its own optimizer step, every pass
    # (ppo_epochs) over them, PPO-clipped against the rollout policy's log-probs. None: the
    # whole batch is one mini-batch (one optimizer step per pass)
    ppo_mini_batch_size: int | None = Field(None, ge=1, description="prompts per optimizer step (None: batch_prompts)")
    micro_batch: int = Field(64, ge=1)
    ckpt_every: int = Field(10, ge=1)
    val_every: int = Field(10, ge=1)
    val_size: int = Field(64, ge=0, description="held-out items validated on: prompts, or map seeds (agentic)")
    # the checkpoint the stage outputs: the last one, or (``val``) the one of the best validation
    # accuracy among the trained ones (earliest on a tie); each validation must be a checkpoint
    # step, so the choice is a checkpoint a resumed run also has
    keep_best: Literal["last", "val"] = "last"
    val_samples: int = Field(4, ge=1, description="math: samples per held-out prompt (agentic: 1 episode)")
    # validation sampling (math; verl's rollout.val_kwargs): None = the training rollouts' value
    val_temperature: float | None = Field(None, gt=0)
    val_top_p: float | None = Field(None, gt=0, le=1)
    grading_timeout_s: float = Field(5.0, gt=0)
    # agentic (GiGPO): A = A^E + step_weight * A^S; "episode" estimator: A^E only
    gamma: float = Field(0.95, ge=0, le=1)
    step_weight: float = 1.0
    gigpo_mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    episode_stats: Literal["steps", "episodes"] = "steps"

    @model_validator(mode="after")
    def _method_known(self):
        if self.adv_estimator not in ESTIMATORS[self.task]:
            raise FieldError("adv_estimator", f"{self.adv_estimator!r} does not apply to task {self.task} "
                                              f"(estimators for {self.task}: {', '.join(ESTIMATORS[self.task])})")
        check_method(self.method, self.method_config, self.task)
        if self.keep_best == "val" and (self.val_size == 0 or self.val_every % self.ckpt_every):
            raise FieldError("keep_best", f"val needs validation (val_size {self.val_size}) at checkpoint steps: "
                                          f"val_every {self.val_every} a multiple of ckpt_every {self.ckpt_every}")
        mb = self.ppo_mini_batch_size
        if mb is not None and (mb > self.batch_prompts or self.batch_prompts % mb):
            raise FieldError("ppo_mini_batch_size", f"{mb} does not divide batch_prompts {self.batch_prompts} "
                                                    "(verl's rule: each mini-batch the same number of prompts)")
        return self

    @property
    def mini_batches(self) -> int:
        """Optimizer steps per pass over a training step's rollouts."""
        return self.batch_prompts // (self.ppo_mini_batch_size or self.batch_prompts)

    @property
    def updates_per_step(self) -> int:
        """Optimizer steps per training step: mini-batches x passes."""
        return self.mini_batches * self.ppo_epochs


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
