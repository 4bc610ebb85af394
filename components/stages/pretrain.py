"""pretrain: the tiny base policy (a Qwen2ForCausalLM) trained from scratch on the
expert traces of easy problems, so that it solves short chains often and long ones
rarely — the hard-prompt regime of the VSR paper. Ends by measuring the base pass
rate per level (``base_rates.json``).

``model: <HF id or path>`` (what a sweep passes for a model without a ``model_specs``
entry, e.g. ``Qwen/Qwen2.5-7B-Instruct``) names a pretrained base policy instead: nothing
is trained; the stage resolves the model (a local directory, or the hub into HF_HOME; offline
only from that cache) and writes ``model_ref.json`` (path, hub revision, file digests), which
every later stage loads the model from. ``revision`` pins a hub commit."""
from __future__ import annotations

from pydantic import Field

from components.stages.base import StageContext, StageParams
from components.budget import DEFAULT_RESPONSE_TOKENS

NAME = "pretrain"
VERSION = 3
INPUTS = ("data",)


class PolicyParams(StageParams):
    layers: int = Field(3, ge=1)
    hidden: int = Field(128, ge=8)
    heads: int = Field(4, ge=1)
    kv_heads: int = Field(4, ge=1)
    ffn: int = Field(512, ge=8)
    max_positions: int = Field(256, ge=16)


class Params(StageParams):
    ADDED_FIELDS = ("model", "revision")
    policy: PolicyParams = PolicyParams()
    steps: int = Field(300, ge=1)
    batch_size: int = Field(128, ge=1)
    lr: float = Field(3e-3, gt=0)
    warmup: int = Field(50, ge=0)
    seed: int = 0
    threads: int | None = None
    max_new_tokens: int = Field(DEFAULT_RESPONSE_TOKENS, ge=1)
    model: str | None = Field(None, description="pretrained base policy (HF id or local directory)")
    revision: str | None = Field(None, description="hub commit / tag of `model` (default: the newest)")


def run(params: Params, ctx: StageContext) -> dict:
    if params.model is not None:
        return _register_pretrained(params, ctx)
    import numpy as np

    from components.data.schema import read_problems
    from components.engine.base import Request, SamplingParams, TokenMeter
    from components.policy.model import TinyPolicyConfig, build_policy, save_policy
    from components.policy.pretraining import pretrain_policy
    from components.policy.tokenizer import build_tokenizer
    from components.stages.common import grade_fn, make_engine, set_threads, write_json

    set_threads(params.threads)
    problems = read_problems(ctx.input("data") / "pretrain.jsonl")
    tok = build_tokenizer()
    model = build_policy(TinyPolicyConfig(**params.policy.model_dump()), tok, seed=params.seed)
    info = pretrain_policy(model, tok, problems, steps=params.steps, batch_size=params.batch_size,
                           lr=params.lr, warmup=params.warmup, seed=params.seed,
                           log_fn=lambda s, m: ctx.tracker.log_metrics({f"pretrain/{k}": v for k, v in m.items()}, s))
    save_policy(model, tok, ctx.out_dir / "model")

    # base pass rate per level at temperature 1, on prepare_data's probe set (never trained on)
    rates, clipped, sampled = {}, 0, 0
    probe_file = ctx.input("data") / "probe.jsonl"
    probes = read_problems(probe_file) if probe_file.is_file() else []
    if probes:
        meter = TokenMeter(stage="pretrain")
        engine, grade = make_engine(model, tok, meter), grade_fn()
        for lv in sorted({p.level for p in probes}):
            probe = [p for p in probes if p.level == lv]
            reqs = [Request(tuple(tok.encode(p.prompt, add_special_tokens=False)), n=4) for p in probe]
            outs = engine.generate(reqs, SamplingParams(1.0, 1.0, params.max_new_tokens, seed=params.seed),
                                   purpose="probe")
            scores = grade([c.text for o in outs for c in o], [p.answer for p, o in zip(probe, outs) for _ in o])
            rates[str(lv)] = float(np.mean([s for s, _ in scores]))
            clipped += sum(c.finish_reason == "length" for o in outs for c in o)
            sampled += sum(len(o) for o in outs)
        grade.grader.close()
        ctx.tracker.log_metrics({f"base_pass_rate/level_{k}": v for k, v in rates.items()})
    # share of probe responses cut off by the response budget (verl: response_length/clip_ratio)
    clip = clipped / sampled if sampled else None
    if clip is not None:
        ctx.tracker.log_metrics({"probe/clip_ratio": clip})
    write_json(ctx.out_dir / "base_rates.json", rates)
    return {**{k: v for k, v in info.items() if isinstance(v, (int, float))}, "base_pass_rate": rates,
            "probe_clip_ratio": clip}


def _register_pretrained(params: Params, ctx: StageContext) -> dict:
    from components.hf_models import MODEL_REF, resolve_model
    from components.stages.common import write_json

    ref = resolve_model(params.model, params.revision)
    write_json(ctx.out_dir / MODEL_REF, ref)
    write_json(ctx.out_dir / "base_rates.json", {})
    ctx.tracker.set_tags({"model.spec": params.model, "model.revision": str(ref["revision"])})
    weights = sum(f["size"] for n, f in ref["files"].items() if n.endswith((".safetensors", ".bin")))
    return {"pretrained": params.model, "revision": ref["revision"], "weight_bytes": weights}
