"""pretrain (agentic): the tiny base policy, behaviour-cloned from a noisy expert
(``components.agentic.bc``) on the ``pretrain`` map seeds, so that it solves short boards often
and long ones rarely. Ends with the base success rate on the first ``probe_seeds`` seeds of the
train pool (``base_rates.json``; one episode each at temperature 1).

``model: <HF id or path>`` registers a pretrained policy instead (as the math pretrain stage).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from components.stages.base import StageContext, StageParams
from components.stages.pretrain import PolicyParams

NAME = "pretrain"
VERSION = 1
INPUTS = ("data",)


class Params(StageParams):
    task: Literal["agentic"] = "agentic"
    policy: PolicyParams = PolicyParams(layers=2, hidden=64, heads=2, kv_heads=2, ffn=256, max_positions=192)
    noise: float = Field(0.1, ge=0, le=1, description="share of random actions in the demonstrations")
    steps: int = Field(300, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(3e-3, gt=0)
    warmup: int = Field(20, ge=0)
    seed: int = 0
    threads: int | None = None
    max_new_tokens: int = Field(8, ge=1)
    probe_seeds: int = Field(64, ge=0)
    model: str | None = None
    revision: str | None = None


def run(params: Params, ctx: StageContext) -> dict:
    if params.model is not None:
        from components.stages.pretrain import _register_pretrained

        return _register_pretrained(params, ctx)
    from components.agentic.bc import demonstrations
    from components.agentic.policy import build_agent_tokenizer
    from components.agentic.rollout import Start, rollout_episodes, success_rate
    from components.agentic.stages.common import env_factory, read_env, write_env
    from components.engine.base import SamplingParams, TokenMeter
    from components.policy.model import TinyPolicyConfig, build_policy, save_policy
    from components.policy.pretraining import pretrain_policy
    from components.stages.common import make_engine, read_json, set_threads, write_json

    set_threads(params.threads)
    spec = read_env(ctx.input("data"))
    make = env_factory(spec)
    seeds = read_json(ctx.input("data") / "seeds.json")
    demos, demo_stats = demonstrations(make, seeds["pretrain"], params.noise, params.seed)
    tok = build_agent_tokenizer(max_positions=params.policy.max_positions)
    model = build_policy(TinyPolicyConfig(**params.policy.model_dump()), tok, seed=params.seed)
    info = pretrain_policy(model, tok, demos, steps=params.steps, batch_size=params.batch_size, lr=params.lr,
                           warmup=params.warmup, seed=params.seed,
                           log_fn=lambda s, m: ctx.tracker.log_metrics({f"pretrain/{k}": v for k, v in m.items()}, s))
    save_policy(model, tok, ctx.out_dir / "model")
    write_env(ctx.out_dir, spec)
    rates = {}
    probe = seeds["train_pool"][: params.probe_seeds]
    if probe:
        engine = make_engine(model, tok, TokenMeter(stage="pretrain"))
        runs = rollout_episodes(engine, make, [Start(s, (), str(s), 1) for s in probe],
                                SamplingParams(1.0, 1.0, params.max_new_tokens, seed=params.seed), purpose="probe")
        rates = {"train_pool": success_rate(runs)}
        ctx.tracker.log_metrics({"base_success/train_pool": rates["train_pool"]})
    write_json(ctx.out_dir / "base_rates.json", rates)
    ctx.tracker.log_metrics({f"demo/{k}": float(v) for k, v in demo_stats.items()})
    return {**{k: v for k, v in info.items() if isinstance(v, (int, float))}, **demo_stats,
            "base_success": rates}
