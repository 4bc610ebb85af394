"""Our train-stage params -> verl's own Hydra config (``ppo_trainer.yaml`` + overrides).

verl's config is composed from its packaged YAML with the Hydra compose API, exactly as
``python -m verl.trainer.main_ppo key=value ...`` would, so every default we do not set is
verl's own. The mapping:

* batch: ``data.train_batch_size = batch_prompts``, ``rollout.n = n`` (the method's samples
  per prompt), ``ppo_mini_batch_size`` (prompts per optimizer step; default the whole batch:
  one step per pass) and ``ppo_epochs``, as the embedded trainer splits the step. Methods with
  variable group sizes (VSR, DAPO, ...) go through verl's update with the step's actual rows,
  split into the same number of mini-batches (trainer.py).
* advantages: ``grpo`` -> ``adv_estimator=grpo``; ``drgrpo`` -> grpo with
  ``norm_adv_by_std_in_grpo=False``; ``rloo`` -> ``rloo``. ``loss_agg_mode`` is passed
  through, with ``loss_scale_factor = max_new_tokens`` (the constant horizon of
  ``seq-mean-token-sum-norm``, the same one the embedded trainer uses).
* KL: ``kl_coef > 0`` -> ``use_kl_loss`` with ``low_var_kl`` (k3, the embedded trainer's).
* checkpoints: ``default_local_dir`` under the stage work dir with ``resume_mode=auto``,
  so a retried task resumes from verl's last ``global_step_*``; ``save_freq = ckpt_every``;
  the HF weights are saved too (``save_contents`` has ``hf_model``) for the stage output.
* logging: ``['console', 'mlflow']``; verl's MLflow logger attaches to ``MLFLOW_RUN_ID``.
* rollouts: vLLM, async mode, token-id agent loop (``agent_loop.py``), prefix caching on.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from components.trainer.train_config import TrainConfig
from components.trainer.verl.rollout import AGENT_LOOP_NAME

AGENT_LOOPS_YAML = Path(__file__).with_name("agent_loops.yaml")

_ESTIMATOR = {"grpo": ("grpo", True), "drgrpo": ("grpo", False), "rloo": ("rloo", True)}


# What a machine without a GPU changes (cpu_platform.py selects the device): no FlashAttention
# (transformers' SDPA, so no remove-padding kernels), no torch.compile (inductor compiles C++
# in every worker: minutes here), vLLM eager in fp32 like the FSDP actor, real weights loaded
# by the rollout at start, and no sleep mode (vLLM's sleep needs CUDA's allocator).
CPU_OVERRIDES = (
    "actor_rollout_ref.model.use_remove_padding=false",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.enable_gradient_checkpointing=false",
    "actor_rollout_ref.actor.use_torch_compile=false",
    "actor_rollout_ref.actor.strategy=fsdp2",       # FSDP2 (fully_shard) runs on CPU over gloo
    "actor_rollout_ref.ref.strategy=fsdp2",
    "actor_rollout_ref.ref.use_torch_compile=false",
    "actor_rollout_ref.rollout.enforce_eager=true",
    "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.rollout.load_format=auto",
    "actor_rollout_ref.rollout.free_cache_engine=false",
    "+actor_rollout_ref.rollout.enable_sleep_mode=false",
)


def verl_config_dir() -> str:
    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def samples_per_prompt(cfg: TrainConfig) -> int:
    """The method's per-prompt group size (``rollout.n``), from its budget contract."""
    from components.methods.registry import build

    method = build(cfg.method, cfg.method_config)
    return max(1, method.rollouts_per_step(cfg.batch_prompts) // cfg.batch_prompts)


def overrides(cfg: TrainConfig, *, model_path: str | Path, work_dir: str | Path, n: int,
              project: str, experiment: str, n_gpus_per_node: int = 1, nnodes: int = 1,
              max_prompt_length: int = 512, rollout_tp: int = 1,
              gpu_memory_utilization: float = 0.5, extra: Sequence[str] = ()) -> list[str]:
    """Hydra override strings (``key=value``) for one training run. ``extra`` comes last, so
    a sweep can set any other verl key (``verl_overrides`` in the train params)."""
    if cfg.adv_estimator not in _ESTIMATOR:
        raise ValueError(f"adv_estimator: '{cfg.adv_estimator}' has no verl mapping (known: {', '.join(_ESTIMATOR)})")
    est, norm_std = _ESTIMATOR[cfg.adv_estimator]
    ckpt_dir = Path(work_dir).resolve() / "verl_checkpoints"
    use_kl = cfg.kl_coef > 0
    ov = {
        # model (actor, rollout and ref share it)
        "actor_rollout_ref.model.path": str(Path(model_path).resolve()),
        "actor_rollout_ref.model.use_remove_padding": True,
        # data / batch sizes: batch_prompts / ppo_mini_batch_size optimizer steps per pass
        "data.train_batch_size": cfg.batch_prompts,
        "data.max_prompt_length": max_prompt_length,
        "data.max_response_length": cfg.max_new_tokens,
        "data.seed": cfg.seed,
        "data.dataloader_num_workers": 0,   # the dataset is indices (trainer._Indices): no worker processes
        "actor_rollout_ref.actor.ppo_mini_batch_size": getattr(cfg, "ppo_mini_batch_size", None) or cfg.batch_prompts,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": cfg.micro_batch,
        "actor_rollout_ref.actor.ppo_epochs": cfg.ppo_epochs,
        "actor_rollout_ref.actor.data_loader_seed": cfg.seed,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": cfg.micro_batch,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": cfg.micro_batch,
        # optimizer
        "actor_rollout_ref.actor.optim.lr": cfg.lr,
        "actor_rollout_ref.actor.optim.weight_decay": cfg.weight_decay,
        "actor_rollout_ref.actor.optim.lr_warmup_steps": cfg.warmup_steps if cfg.warmup_steps > 0 else -1,
        "actor_rollout_ref.actor.optim.clip_grad": cfg.grad_clip,
        # loss
        "actor_rollout_ref.actor.loss_agg_mode": cfg.loss_agg_mode,
        "actor_rollout_ref.actor.loss_scale_factor": cfg.max_new_tokens,
        "actor_rollout_ref.actor.clip_ratio_low": cfg.clip_low,
        "actor_rollout_ref.actor.clip_ratio_high": cfg.clip_high,
        "actor_rollout_ref.actor.entropy_coeff": 0.0,
        "actor_rollout_ref.actor.use_kl_loss": use_kl,
        "actor_rollout_ref.actor.kl_loss_coef": cfg.kl_coef if use_kl else 0.0,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.actor.checkpoint.save_contents": "[model,optimizer,extra,hf_model]",
        # advantages (on the driver, uid-grouped)
        "algorithm.adv_estimator": est,
        "algorithm.norm_adv_by_std_in_grpo": norm_std,
        "algorithm.use_kl_in_reward": False,
        # rollouts: vLLM server replicas fed token ids by our agent loop
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.n": n,
        "actor_rollout_ref.rollout.temperature": cfg.temperature,
        "actor_rollout_ref.rollout.top_p": cfg.top_p,
        "actor_rollout_ref.rollout.seed": cfg.seed,
        "actor_rollout_ref.rollout.enable_prefix_caching": True,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": rollout_tp,
        "actor_rollout_ref.rollout.gpu_memory_utilization": gpu_memory_utilization,
        "actor_rollout_ref.rollout.prompt_length": max_prompt_length,
        "actor_rollout_ref.rollout.response_length": cfg.max_new_tokens,
        "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_LOOP_NAME,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(AGENT_LOOPS_YAML),
        "actor_rollout_ref.rollout.agent.num_workers": max(1, n_gpus_per_node * nnodes),
        # the method grades on the driver (agent_loop.py sets reward_score): one idle reward
        # worker instead of verl's default 8 processes
        "reward.num_workers": 1,
        # trainer: steps, checkpoints under the stage work dir, logging to the stage's MLflow run
        "trainer.use_v1": False,          # RayPPOTrainer (trainer.py subclasses it)
        "trainer.total_training_steps": cfg.steps,
        "trainer.total_epochs": 1_000_000,  # steps, not epochs, bound the run
        "trainer.save_freq": cfg.ckpt_every,
        "trainer.test_freq": cfg.val_every,
        "trainer.val_before_train": cfg.val_size > 0,
        "trainer.resume_mode": "auto",
        "trainer.default_local_dir": str(ckpt_dir),
        "trainer.max_actor_ckpt_to_keep": 2,
        "trainer.logger": "[console,mlflow]",
        "trainer.project_name": project,
        "trainer.experiment_name": experiment,
        "trainer.n_gpus_per_node": n_gpus_per_node,
        "trainer.nnodes": nnodes,
        "trainer.balance_batch": True,
    }
    # validation samples through the same per-request overrides as training (rollout.py); the
    # config says so too where a sweep sets them
    for key in ("temperature", "top_p"):
        if getattr(cfg, f"val_{key}", None) is not None:
            ov[f"actor_rollout_ref.rollout.val_kwargs.{key}"] = getattr(cfg, f"val_{key}")
            ov["actor_rollout_ref.rollout.val_kwargs.do_sample"] = True
    return [f"{k}={hydra_value(v)}" for k, v in ov.items()] + list(extra)


def hydra_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def compose(override_list: Sequence[str], config_name: str = "ppo_trainer"):
    """verl's ``config_name`` config with the overrides applied (an OmegaConf DictConfig)."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()   # compose may run more than once per process (tests, retries)
    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(override_list))


def stage_overrides(cfg: TrainConfig, params: Any, *, model_dir: str | Path, work_dir: str | Path, n: int,
                    sweep: str, experiment: str, extra: Sequence[str] = (), gpu: bool | None = None) -> list[str]:
    """The overrides of one train stage call (math or agentic): the train config's mapping, the
    stage's cluster fields (``n_gpus_per_node``, ``nnodes``, ``max_prompt_length``,
    ``rollout_tp``, ``gpu_memory_utilization``), the CPU defaults where there is no GPU (``gpu``:
    default, whether this machine has one), then ``extra`` (the caller's own keys), then the
    sweep's ``verl_overrides``: last, so a sweep can undo any default."""
    if gpu is None:
        import torch

        gpu = torch.cuda.is_available()
    return overrides(cfg, model_path=model_dir, work_dir=work_dir, n=n, project=sweep or "rlvr", experiment=experiment,
                     n_gpus_per_node=params.n_gpus_per_node, nnodes=params.nnodes,
                     max_prompt_length=params.max_prompt_length, rollout_tp=params.rollout_tp,
                     gpu_memory_utilization=params.gpu_memory_utilization,
                     extra=(() if gpu else CPU_OVERRIDES) + tuple(extra) + tuple(params.verl_overrides))


def stage_config(cfg: TrainConfig, params: Any, **kw):
    """The resolved verl config of one train stage call (``stage_overrides``' keywords)."""
    from omegaconf import OmegaConf

    config = compose(stage_overrides(cfg, params, **kw))
    OmegaConf.resolve(config)
    return config
