"""pretrain: the tiny base policy (a Qwen2ForCausalLM) trained from scratch on the
expert traces of easy problems, so that it solves short chains often and long ones
rarely — the hard-prompt regime of the VSR paper. Ends by measuring the base pass
rate per level (``base_rates.json``). With ``init: <model dir or HF id>`` the stage
instead copies/loads an existing model (real-model sweeps skip pretraining)."""
from __future__ import annotations

from pydantic import Field

from components.stages.base import StageContext, StageParams

NAME = "pretrain"
VERSION = 1
INPUTS = ("data",)


class PolicyParams(StageParams):
    layers: int = Field(3, ge=1)
    hidden: int = Field(128, ge=8)
    heads: int = Field(4, ge=1)
    kv_heads: int = Field(4, ge=1)
    ffn: int = Field(512, ge=8)
    max_positions: int = Field(256, ge=16)


class Params(StageParams):
    policy: PolicyParams = PolicyParams()
    steps: int = Field(300, ge=1)
    batch_size: int = Field(128, ge=1)
    lr: float = Field(3e-3, gt=0)
    warmup: int = Field(50, ge=0)
    seed: int = 0
    threads: int | None = None
    probe_per_level: int = Field(64, ge=0, description="problems per level for the base pass-rate probe")
    probe_levels: list[int] = [3, 5, 7, 8]
    max_new_tokens: int = Field(96, ge=1)


def run(params: Params, ctx: StageContext) -> dict:
    import numpy as np

    from components.data.schema import read_problems
    from components.data.synthetic import generate_problems
    from components.engine.base import Request, SamplingParams, TokenMeter
    from components.policy import TinyPolicyConfig, build_policy, build_tokenizer, pretrain_policy, save_policy
    from components.stages.common import grade_fn, make_engine, set_threads, write_json

    set_threads(params.threads)
    problems = read_problems(ctx.input("data") / "pretrain.jsonl")
    tok = build_tokenizer()
    model = build_policy(TinyPolicyConfig(**params.policy.model_dump()), tok, seed=params.seed)
    info = pretrain_policy(model, tok, problems, steps=params.steps, batch_size=params.batch_size,
                           lr=params.lr, warmup=params.warmup, seed=params.seed,
                           log_fn=lambda s, m: ctx.tracker.log_metrics({f"pretrain/{k}": v for k, v in m.items()}, s))
    save_policy(model, tok, ctx.out_dir / "model")

    # base pass rate per level at temperature 1 (fresh problems, never trained on)
    rates = {}
    if params.probe_per_level:
        meter = TokenMeter(stage="pretrain")
        engine, grade = make_engine(model, tok, meter), grade_fn()
        seen = {p.uid for p in problems}
        for lv in params.probe_levels:
            probe = generate_problems(params.probe_per_level, [lv], seed=10_000 + lv, exclude=seen)
            reqs = [Request(tuple(tok.encode(p.prompt, add_special_tokens=False)), n=1) for p in probe]
            outs = engine.generate(reqs, SamplingParams(1.0, 1.0, params.max_new_tokens, seed=params.seed),
                                   purpose="probe")
            scores = grade([o[0].text for o in outs], [p.answer for p in probe])
            rates[str(lv)] = float(np.mean([s for s, _ in scores]))
        grade.grader.close()
        ctx.tracker.log_metrics({f"base_pass_rate/level_{k}": v for k, v in rates.items()})
    write_json(ctx.out_dir / "base_rates.json", rates)
    return {**{k: v for k, v in info.items() if isinstance(v, (int, float))}, "base_pass_rate": rates}
