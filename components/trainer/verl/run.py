"""One training run on verl: the ``train`` stage's ``backend: verl`` (math or agentic) and
``rlvr train-verl`` (``components/cli.py``). Same inputs and outputs as the embedded path
(``components/stages/train.py``); Ray and the GPU workers start here, then the verl trainer
(``trainer.py``) of the run's task."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

from components.trainer.train_config import train_config_of

CPU_RAY_UNITS = 8


def build_config(params: Any, model_dir: Path, work_dir: Path, sweep: str):
    """verl's composed, resolved config for these train params."""
    from components.trainer.verl.hydra_config import samples_per_prompt, stage_config

    cfg = train_config_of(params)
    return cfg, stage_config(cfg, params, model_dir=model_dir, work_dir=work_dir, n=samples_per_prompt(cfg),
                             sweep=sweep, experiment=f"train-{cfg.method}-s{cfg.seed}")


def episode_fields(c, response_length: int) -> SimpleNamespace:
    """What ``hydra_config.overrides`` reads from a train config, for an episodic run: one
    optimizer step per update (``ppo_epochs`` 1, the whole batch one mini-batch), so the PPO
    ratio is 1 and clipping never binds, as in the embedded trainer. ``adv_estimator`` only
    satisfies verl's config: the trainer computes GiGPO itself."""
    return SimpleNamespace(
        adv_estimator="grpo", batch_prompts=c.batch_prompts, max_new_tokens=response_length, seed=c.seed,
        micro_batch=c.micro_batch, ppo_epochs=1, lr=c.lr, weight_decay=0.0, warmup_steps=0, grad_clip=c.grad_clip,
        loss_agg_mode=c.loss_agg_mode, clip_low=0.2, clip_high=0.2, kl_coef=0.0, temperature=c.temperature,
        top_p=c.top_p, steps=c.steps, ckpt_every=c.ckpt_every, val_every=c.val_every, val_size=c.val_size)


def build_episode_config(params: Any, model_dir: Path, work_dir: Path, sweep: str):
    """verl's composed, resolved config for agentic train params: the episode agent loop, a
    response budget of one turn (layout ``turns``) or of a serialized episode."""
    from components.methods.registry import build
    from components.trainer.verl.episodes import AGENT_LOOP_NAME
    from components.trainer.verl.hydra_config import stage_config

    cfg = train_config_of(params)
    response_length = cfg.max_new_tokens if params.layout == "turns" else params.max_episode_tokens
    n = build(cfg.method, cfg.method_config, task="agentic").rollouts_per_step(1)   # episodes per start state
    return cfg, stage_config(episode_fields(cfg, response_length), params, model_dir=model_dir, work_dir=work_dir,
                             n=n, sweep=sweep, experiment=f"train-agentic-{cfg.method}-s{cfg.seed}",
                             extra=(f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_LOOP_NAME}",))


def attach_mlflow(run_id: str) -> None:
    """verl's MLflow logger starts ``mlflow.start_run(run_id=$MLFLOW_RUN_ID)``: point it at the
    stage's run in the project's tracking store."""
    from components.lineage import tracking_uri

    os.environ.setdefault("MLFLOW_TRACKING_URI", tracking_uri())
    if run_id:
        os.environ["MLFLOW_RUN_ID"] = run_id


def prepare(params: Any, ctx) -> dict:
    """Everything a run needs before Ray starts: the model directory (through
    ``model_ref.json`` for a registered base policy), the training and held-out items, the
    resources the methods read, and verl's validated config. A bad input fails here."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from components.hf_models import model_dir_of
    from components.stages.common import read_json
    from components.trainer.verl.cells import verl_form_refusal

    why = verl_form_refusal(params.method, params.method_config)   # sweep validation refuses it too
    if why is not None:
        raise ValueError(f"method {params.method!r} has no verl form ({why}); run it with backend: embedded")
    # the embedded path's own resolver: a registered base policy (``model_ref.json``: hub
    # snapshot, local directory, GGUF export) is followed too
    model_dir = model_dir_of(ctx.input("model"))
    hard_dir = ctx.input("hard")
    traces = read_json(ctx.input("prefixes") / "traces.json")
    if is_episodic(params):
        from components.envs.spec import env_factory, read_env

        spec = read_env(hard_dir)
        env_factory(spec)                                  # a bad spec fails here, before Ray starts
        kept = read_json(hard_dir / "train.json")
        run = {"items": [r["seed"] for r in kept], "val": [r["seed"] for r in read_json(hard_dir / "heldout.json")],
               "env_spec": spec, "resources": {"expert_traces": traces, "p0": {
                   r["seed"]: r["base_pass_rate"] for r in kept if r["base_pass_rate"] is not None}}}
        cfg, config = build_episode_config(params, model_dir, ctx.work_dir, ctx.sweep)
    else:
        from components.data.schema import read_problems

        problems = read_problems(hard_dir / "train.jsonl")
        run = {"items": problems, "val": read_problems(hard_dir / "heldout.jsonl"),
               "resources": {"expert_traces": traces, "p0": {p.uid: p.meta.get("base_pass_rate", 0.0)
                                                             for p in problems}}}
        if "teacher" in ctx.inputs:          # a distilling method's teacher model (OPD, PG-OPD)
            run["resources"]["teacher"] = ctx.input("teacher")
        cfg, config = build_config(params, model_dir, ctx.work_dir, ctx.sweep)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return {**run, "model_dir": model_dir, "cfg": cfg, "config": config}


def is_episodic(params: Any) -> bool:
    return getattr(params, "task", "math") == "agentic"


def cpu_platform_env() -> dict[str, str]:
    """Where there is no GPU: register the CPU platform (``cpu_platform.py``) and return the
    environment its Ray workers need; on a GPU machine nothing, ``{}``."""
    import torch

    if torch.cuda.is_available():
        return {}
    from components.trainer.verl.cpu_platform import use_cpu_platform

    return use_cpu_platform()


@contextlib.contextmanager
def ray_session(params: Any, config, on_cpu: dict[str, str], cpu_units: int = CPU_RAY_UNITS) -> Iterator[None]:
    """Ray for one run: a Ray of its own, started (and shut down) here, or, with ``RAY_ADDRESS``
    set, a running cluster joined as one job (a KubeRay RayJob's head; the scale tests' one head
    per session); the process's own Ray when it already has one. ``cpu_units``: the Ray CPUs a
    CPU run declares (scheduling units, see below)."""
    import ray
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    started_ray = not ray.is_initialized()
    if started_ray:
        # the PPO config's ray_kwargs; the SFT config has none
        ray_init = OmegaConf.select(config, "ray_kwargs.ray_init", default=None) or {}
        env = OmegaConf.merge(get_ppo_ray_runtime_env(config), ray_init.get("runtime_env", {}))
        init = {"runtime_env": OmegaConf.to_container(env), "num_cpus": ray_init.get("num_cpus")}
        slots = params.n_gpus_per_node * params.nnodes
        if on_cpu:
            # one worker slot per "GPU" of verl's resource pool (see cpu_platform's docstring)
            init["runtime_env"].setdefault("env_vars", {}).update(on_cpu)
            init["num_gpus"] = slots
            # Ray CPUs are scheduling units here, not cores: verl's PPO pool reserves 3 per
            # worker slot, its agent-loop, reward and vLLM-server actors one each
            init["num_cpus"] = max(init["num_cpus"] or 0, cpu_units)
            init["include_dashboard"] = False
            # Ray prestarts one idle Python worker per CPU unit for the first driver: on a
            # 2-core machine that is seconds of CPU each for processes nobody uses
            os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
        if os.environ.get("RAY_ADDRESS"):
            # a running cluster declares its own resources (Ray refuses them on connect); it must
            # already hold the run's slots (the RayJob's cluster is fixed-size: no autoscaler)
            need = {"GPU": slots, "CPU": init.pop("num_cpus", None) or 0}
            init.pop("num_gpus", None), init.pop("include_dashboard", None)
            ray.init(**init)
            have = ray.cluster_resources()
            short = [f"{k} {have.get(k, 0):g} < {v:g}" for k, v in need.items() if have.get(k, 0) < v]
            if short:
                ray.shutdown()
                raise RuntimeError(f"RAY_ADDRESS={os.environ['RAY_ADDRESS']}: the cluster has too few resources "
                                   f"for this run ({', '.join(short)}; GPU = worker slots, n_gpus_per_node x nnodes)")
        else:
            # "local": a Ray of its own even when `ray start` left a cluster address on this
            # machine (/tmp/ray/ray_current_cluster), which a bare ray.init would join
            ray.init(address="local", **init)
    try:
        yield
    finally:
        if started_ray:
            # the workers hold the run's slots: a later run in this process (a retried task, the
            # next stage of a test session) would wait for them forever. On a joined cluster this
            # ends the run's job, and Ray removes its actors and placement groups with it.
            ray.shutdown()


def verl_workers(config) -> dict[str, Any]:
    """verl's own role -> worker and resource-pool wiring: the keyword arguments (besides the
    config) of a ``RayPPOTrainer``."""
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.utils.config import omega_conf_to_dataclass

    runner = BaseTaskRunner()
    _, wg_cls = runner.add_actor_rollout_worker(config)
    runner.add_reward_model_resource_pool(config)
    pools = runner.init_resource_pool_mgr(config)
    return {"tokenizer": omega_conf_to_dataclass(config.actor_rollout_ref.model).tokenizer,
            "role_worker_mapping": runner.role_worker_mapping, "resource_pool_manager": pools,
            "ray_worker_group_cls": wg_cls}


def train_with_verl(params: Any, ctx) -> dict:
    on_cpu = cpu_platform_env()
    if params.method == "sft":          # verl's SFT trainer, not its PPO trainer
        from components.trainer.verl.sft import train_sft_with_verl

        return train_sft_with_verl(params, ctx, on_cpu)
    run = prepare(params, ctx)
    attach_mlflow(ctx.tracker.run_id)
    with ray_session(params, run["config"], on_cpu):
        return _fit(params, ctx, run)


def _fit(params: Any, ctx, run: dict) -> dict:
    from components.stages.common import grade_fn
    from components.trainer.verl.trainer import EpisodePPOTrainer, RLVRPPOTrainer

    cfg, config = run["cfg"], run["config"]
    grade = None
    if is_episodic(params):          # the environment grades inside the agent loop
        trainer = EpisodePPOTrainer(config, **verl_workers(config), train_cfg=cfg, env_spec=run["env_spec"],
                                    layout=params.layout, max_prompt_length=params.max_prompt_length,
                                    n_train=len(run["items"]))
    else:
        trainer = RLVRPPOTrainer(config, **verl_workers(config), train_cfg=cfg, n_train=len(run["items"]),
                                 n_val=min(len(run["val"]), cfg.val_size))
        grade = trainer.grade = grade_fn(cfg.grading_timeout_s)
    trainer.init_workers()
    status = "FAILED"
    try:
        summary = trainer.fit_loop(run["items"], run["val"], run["resources"])
        status = "FINISHED"
    finally:
        if grade is not None:
            grade.grader.close()
        end_mlflow_run(status)
    trainer.save_outputs(ctx.out_dir)
    return summary


def end_mlflow_run(status: str) -> None:
    """verl's MLflow logger starts the stage's run in this process (``mlflow.start_run``) and
    only its ``Tracking.finish`` ends it: without this, the next verl run in the same process
    cannot start its own run ("already active"). The stage runner records the final status too."""
    import mlflow

    if mlflow.active_run() is not None:
        mlflow.end_run(status=status)
