"""pretrain: the tiny base policy (a Qwen2ForCausalLM) trained from scratch, on every task,
so that it solves short items often and long ones rarely -- the hard-prompt regime of the VSR
paper. The task's data-stage part says on what (``pretrain``): math on the expert traces of easy problems,
ending with the base pass rate per level; episodes by behaviour cloning of a noisy expert
(``components.agentic.bc``) on the ``pretrain`` map seeds, ending with the base success rate on
the first ``probe_seeds`` seeds of the train pool. Either writes ``base_rates.json``.

``model: <HF id or path>`` (what a sweep passes for a model without a ``model_specs``
entry, e.g. ``Qwen/Qwen2.5-7B-Instruct``) names a pretrained base policy instead: nothing
is trained; the stage resolves the model (a local directory, or the hub into HF_HOME; offline
only from that cache) and writes ``model_ref.json`` (path, hub revision, file digests), which
every later stage loads the model from. ``revision`` pins a hub commit."""
from __future__ import annotations

from pydantic import Field

from components.budget import DEFAULT_RESPONSE_TOKENS
from components.stages.base import StageContext, StageParams, TaskParams

NAME = "pretrain"
VERSION = 3
TASKS = ("math", "agentic")
INPUTS = ("data",)


class PolicyParams(StageParams):
    layers: int = Field(3, ge=1)
    hidden: int = Field(128, ge=8)
    heads: int = Field(4, ge=1)
    kv_heads: int = Field(4, ge=1)
    ffn: int = Field(512, ge=8)
    max_positions: int = Field(256, ge=16)


class Params(TaskParams):
    ADDED_FIELDS = ("model", "revision", "task", "noise", "probe_seeds")
    # the behaviour-cloned agent: a smaller policy, a shorter warm-up, one action word per turn
    TASK_DEFAULTS = {"agentic": {"policy": PolicyParams(layers=2, hidden=64, heads=2, kv_heads=2, ffn=256,
                                                        max_positions=192),
                                 "batch_size": 64, "warmup": 20, "max_new_tokens": 8}}
    ONLY = {"noise": "agentic", "probe_seeds": "agentic"}
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
    noise: float = Field(0.1, ge=0, le=1, description="agentic: share of random actions in the demonstrations")
    probe_seeds: int = Field(64, ge=0, description="agentic: train-pool map seeds the base success is probed on")


def run(params: Params, ctx: StageContext) -> dict:
    if params.model is not None:
        return _register_pretrained(params, ctx)
    from components.stages.common import set_threads
    from components.stages.task_parts import data_stages

    set_threads(params.threads)
    return data_stages(params.task).pretrain(params, ctx)


def _register_pretrained(params: Params, ctx: StageContext) -> dict:
    from components.hf_models import MODEL_REF, resolve_model
    from components.stages.common import write_json

    ref = resolve_model(params.model, params.revision)
    write_json(ctx.out_dir / MODEL_REF, ref)
    write_json(ctx.out_dir / "base_rates.json", {})
    ctx.tracker.set_tags({"model.spec": params.model, "model.revision": str(ref["revision"])})
    weights = sum(f["size"] for n, f in ref["files"].items() if n.endswith((".safetensors", ".bin")))
    return {"pretrained": params.model, "revision": ref["revision"], "weight_bytes": weights}


def train_base_policy(params: Params, ctx: StageContext, tok, examples) -> tuple[object, dict]:
    """The tiny policy trained from scratch on ``examples`` (``params.policy``, the schedule) and
    saved to ``ctx.out_dir / "model"``; it and the numbers of its training summary."""
    from components.policy.model import TinyPolicyConfig, build_policy, save_policy
    from components.policy.pretraining import pretrain_policy

    model = build_policy(TinyPolicyConfig(**params.policy.model_dump()), tok, seed=params.seed)
    info = pretrain_policy(model, tok, examples, steps=params.steps, batch_size=params.batch_size, lr=params.lr,
                           warmup=params.warmup, seed=params.seed,
                           log_fn=lambda s, m: ctx.tracker.log_metrics({f"pretrain/{k}": v for k, v in m.items()}, s))
    save_policy(model, tok, ctx.out_dir / "model")
    return model, {k: v for k, v in info.items() if isinstance(v, (int, float))}
