"""One training run on verl: the ``train`` stage's ``backend: verl`` and ``rlvr train-verl``
(``components/cli.py``). Same inputs and outputs as the embedded path
(``components/stages/train.py``); Ray and the GPU workers start here."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator

from components.trainer.train_config import train_config_of

CPU_RAY_UNITS = 8


def model_path(model_input: Path) -> Path:
    """The HF directory verl loads: the embedded path's own resolver, so a registered base
    policy (``model_ref.json``: hub snapshot, local directory, GGUF export) is followed too."""
    from components.hf_models import model_dir_of

    return model_dir_of(model_input)


def build_config(params: Any, model_dir: Path, work_dir: Path, sweep: str):
    """verl's composed, resolved config for these train params."""
    from components.trainer.verl.hydra_config import samples_per_prompt, stage_config

    cfg = train_config_of(params)
    return cfg, stage_config(cfg, params, model_dir=model_dir, work_dir=work_dir, n=samples_per_prompt(cfg),
                             sweep=sweep, experiment=f"train-{cfg.method}-s{cfg.seed}")


def attach_mlflow(run_id: str) -> None:
    """verl's MLflow logger starts ``mlflow.start_run(run_id=$MLFLOW_RUN_ID)``: point it at the
    stage's run in the project's tracking store."""
    from components.lineage import tracking_uri

    os.environ.setdefault("MLFLOW_TRACKING_URI", tracking_uri())
    if run_id:
        os.environ["MLFLOW_RUN_ID"] = run_id


def prepare(params: Any, ctx) -> dict:
    """Everything a run needs before Ray starts: the model directory (through
    ``model_ref.json`` for a registered base policy), the prompts, the resources the methods
    read, and verl's validated config."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from components.data.schema import read_problems
    from components.stages.common import read_json

    model_dir = model_path(ctx.input("model"))
    hard_dir = ctx.input("hard")
    problems = read_problems(hard_dir / "train.jsonl")
    val = read_problems(hard_dir / "heldout.jsonl")
    traces = read_json(ctx.input("prefixes") / "traces.json")
    p0 = {p.uid: p.meta.get("base_pass_rate", 0.0) for p in problems}
    cfg, config = build_config(params, model_dir, ctx.work_dir, ctx.sweep)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return {"model_dir": model_dir, "cfg": cfg, "config": config, "problems": problems, "val": val,
            "resources": {"expert_traces": traces, "p0": p0}}


def cpu_platform_env() -> dict[str, str]:
    """Where there is no GPU: register the CPU platform (``cpu_platform.py``) and return the
    environment its Ray workers need; on a GPU machine nothing, ``{}``."""
    import torch

    if torch.cuda.is_available():
        return {}
    from components.trainer.verl.cpu_platform import use_cpu_platform

    return use_cpu_platform()


@contextlib.contextmanager
def ray_session(params: Any, config, on_cpu: dict[str, str]) -> Iterator[None]:
    """Ray for one run, started (and shut down) here unless the process already has one."""
    import ray
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    started_ray = not ray.is_initialized()
    if started_ray:
        env = OmegaConf.merge(get_ppo_ray_runtime_env(config), config.ray_kwargs.ray_init.get("runtime_env", {}))
        init = {"runtime_env": OmegaConf.to_container(env), "num_cpus": config.ray_kwargs.ray_init.num_cpus}
        if on_cpu:
            # one worker slot per "GPU" of verl's resource pool (see cpu_platform's docstring)
            init["runtime_env"].setdefault("env_vars", {}).update(on_cpu)
            init["num_gpus"] = params.n_gpus_per_node * params.nnodes
            # Ray CPUs are scheduling units here, not cores: verl's pool reserves 3 per worker
            # slot, its agent-loop, reward and vLLM-server actors one each
            init["num_cpus"] = max(init["num_cpus"] or 0, CPU_RAY_UNITS)
            init["include_dashboard"] = False
            # Ray prestarts one idle Python worker per CPU unit for the first driver: on a
            # 2-core machine that is seconds of CPU each for processes nobody uses
            os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
        ray.init(**init)
    try:
        yield
    finally:
        if started_ray:
            # the workers hold the run's slots: a later run in this process (a retried task, the
            # next stage of a test session) would wait for them forever
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
    run = prepare(params, ctx)
    attach_mlflow(ctx.tracker.run_id)
    with ray_session(params, run["config"], on_cpu):
        return _fit(ctx, run)


def _fit(ctx, run: dict) -> dict:
    from components.stages.common import grade_fn
    from components.trainer.verl.trainer import RLVRPPOTrainer

    cfg, config, problems, val = run["cfg"], run["config"], run["problems"], run["val"]
    trainer = RLVRPPOTrainer(config, **verl_workers(config), train_cfg=cfg, n_train=len(problems),
                             n_val=min(len(val), cfg.val_size))
    trainer.init_workers()
    grade = grade_fn(cfg.grading_timeout_s)
    status = "FAILED"
    try:
        summary = trainer.fit_rlvr(problems, val, run["resources"], grade)
        status = "FINISHED"
    finally:
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
