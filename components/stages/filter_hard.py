"""filter_hard: keep the prompts the base policy almost never solves.

k samples per prompt at the base policy's sampling settings; a prompt is kept when it
has at most c successes (VSR paper: pass@32 <= 1, i.e. k=32, c=1). Sampling runs in
rounds of ``round_size`` and stops early for a prompt once it has more than c
successes: the keep/drop decision and the kept prompts' success counts are exactly
those of k samples, at a fraction of the cost (every generated token is still metered
with purpose ``filter``). Applied to the training pool and, identically, to the
held-out pool (the evaluation set of the embedded sweep).
"""
from __future__ import annotations

import json
from collections import Counter

from typing import Literal

from pydantic import Field, model_validator

from components.stages.base import StageContext, StageParams

NAME = "filter_hard"
VERSION = 1
INPUTS = ("data", "model")


class Params(StageParams):
    ADDED_FIELDS = ("prompt_template", "engine", "keep_all")
    k: int = Field(32, ge=1)
    c: int = Field(1, ge=0)
    round_size: int = Field(8, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(96, ge=1)
    max_prompts: int = Field(1000, ge=1, description="cap on kept training prompts (VSR: 1K)")
    max_heldout: int = Field(256, ge=0)
    requests_per_call: int = Field(128, ge=1)
    seed: int = 0
    threads: int | None = None
    # "chat" for an instruction-tuned base policy (the papers' Qwen/Llama models): the same
    # rendering the train and evaluate stages use, so "hard" means hard in that format
    prompt_template: Literal["raw", "chat"] = "raw"
    engine: Literal["hf", "vllm"] = "hf"      # vllm: on a GPU, in the trainer image
    # keep every prompt of the pools without sampling (papers that train on the whole dataset:
    # VIGOR, VIP); the caps max_prompts / max_heldout still apply
    keep_all: bool = False

    @model_validator(mode="after")
    def _c_below_k(self):
        if self.c >= self.k:
            raise ValueError(f"c ({self.c}) must be < k ({self.k}): otherwise every prompt is 'hard'")
        return self


def filter_pool(problems, engine, grade, tok, params: Params, seed: int):
    """-> list of (problem, successes, samples drawn) for every prompt, early-stopped."""
    from components.data.prompting import encode_prompt
    from components.engine.base import Request, SamplingParams

    succ = {p.uid: 0 for p in problems}
    drawn = {p.uid: 0 for p in problems}
    active = list(problems)
    rnd = 0
    while active:
        n = min(params.round_size, params.k - drawn[active[0].uid])
        for i in range(0, len(active), params.requests_per_call):
            chunk = active[i:i + params.requests_per_call]
            reqs = [Request(encode_prompt(p, tok, params.prompt_template), n=n, tag=p.uid) for p in chunk]
            sp = SamplingParams(params.temperature, params.top_p, params.max_new_tokens,
                                seed=seed * 1_000_003 + rnd * 10_007 + i)
            outs = engine.generate(reqs, sp, purpose="filter")
            texts = [c.text for o in outs for c in o]
            golds = [p.answer for p, o in zip(chunk, outs) for _ in o]
            scores = iter(grade(texts, golds))
            for p, o in zip(chunk, outs):
                succ[p.uid] += sum(next(scores)[0] > 0.5 for _ in o)
                drawn[p.uid] += len(o)
        rnd += 1
        active = [p for p in active if succ[p.uid] <= params.c and drawn[p.uid] < params.k]
    return [(p, succ[p.uid], drawn[p.uid]) for p in problems]


def run(params: Params, ctx: StageContext) -> dict:
    from dataclasses import replace

    from components.data.schema import read_problems, write_problems
    from components.engine.base import TokenMeter
    from components.stages.common import grade_fn, open_engine, set_threads, write_json

    if params.keep_all:
        return _keep_all(params, ctx)
    set_threads(params.threads)
    meter = TokenMeter(stage="filter_hard")
    engine, tok = open_engine(ctx.input("model"), meter, params.engine)
    grade = grade_fn()
    out, hist = {}, {}
    try:
        for split, fname, cap, seed in (("train", "train_pool.jsonl", params.max_prompts, params.seed),
                                        ("heldout", "heldout_pool.jsonl", params.max_heldout, params.seed + 1)):
            pool = read_problems(ctx.input("data") / fname)
            if cap == 0 or not pool:
                write_problems(ctx.out_dir / f"{split}.jsonl", [])
                out[split] = 0
                continue
            with meter.tagged(split=split):
                res = filter_pool(pool, engine, grade, tok, params, seed)
            kept = [replace(p, meta={**p.meta, "base_successes": s, "base_samples": d, "base_pass_rate": s / d})
                    for p, s, d in res if s <= params.c][:cap]
            out[split] = write_problems(ctx.out_dir / f"{split}.jsonl", kept)
            hist[split] = dict(sorted(Counter(min(s, params.c + 1) for _, s, _ in res).items()))
            by_level = Counter(p.level for p in kept)
            ctx.tracker.log_metrics({f"{split}/kept": len(kept), f"{split}/pool": len(pool),
                                     **{f"{split}/kept_level_{k}": v for k, v in by_level.items()}})
    finally:
        grade.grader.close()
    tokens = meter.totals("filter")
    write_json(ctx.out_dir / "stats.json", {"kept": out, "successes_histogram": hist, "tokens": tokens,
                                            "k": params.k, "c": params.c})
    (ctx.out_dir / "tokens.json").write_text(json.dumps(meter.to_rows()))
    if out.get("train", 0) == 0:
        raise ValueError(f"filter_hard: no training prompt has <= {params.c} successes in {params.k}; "
                         "use harder pool_levels in prepare_data or a weaker base policy")
    return {"kept_train": out.get("train", 0), "kept_heldout": out.get("heldout", 0),
            "filter_generated_tokens": tokens["generated_tokens"]}


def _keep_all(params: Params, ctx: StageContext) -> dict:
    from components.data.schema import read_problems, write_problems
    from components.stages.common import write_json

    out = {}
    for split, fname, cap in (("train", "train_pool.jsonl", params.max_prompts),
                              ("heldout", "heldout_pool.jsonl", params.max_heldout)):
        out[split] = write_problems(ctx.out_dir / f"{split}.jsonl", read_problems(ctx.input("data") / fname)[:cap])
    write_json(ctx.out_dir / "stats.json", {"kept": out, "keep_all": True})
    (ctx.out_dir / "tokens.json").write_text("[]")
    if out["train"] == 0:
        raise ValueError(f"filter_hard: {ctx.input('data')}/train_pool.jsonl has no problems")
    return {"kept_train": out["train"], "kept_heldout": out["heldout"], "filter_generated_tokens": 0}
