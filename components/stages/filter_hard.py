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

from components.data.mixtures import pools_dir
from components.stages.base import StageContext, StageParams
from components.budget import DEFAULT_RESPONSE_TOKENS

NAME = "filter_hard"
VERSION = 2
INPUTS = ("data", "model")


class Params(StageParams):
    ADDED_FIELDS = ("prompt_template", "engine", "keep_all", "min_pass", "max_pass", "filter_model", "data_mixture")
    k: int = Field(32, ge=1)
    c: int = Field(1, ge=0)
    round_size: int = Field(8, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(DEFAULT_RESPONSE_TOKENS, ge=1)
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
    # the pools of one of prepare_data's mixtures instead of the base set (the sweep's model_data)
    data_mixture: str | None = None
    # a difficulty band instead of "hard": keep the prompts whose pass rate over all k samples
    # lies in [min_pass, max_pass] (both inclusive; ``c`` is then unused). The sanity sweep's
    # "solved sometimes" prompts: min_pass 0.2, max_pass 0.8.
    min_pass: float | None = Field(None, ge=0, le=1)
    max_pass: float | None = Field(None, ge=0, le=1)
    # the one model whose pass rates define the hard subset of every model of the sweep (the
    # VSR paper filters once, with Qwen2.5-7B-Instruct, and trains Llama-3.2-3B on that subset
    # too); read by the stage graph, which then runs this stage once. None: each model filters
    # with itself.
    filter_model: str | None = None

    @model_validator(mode="after")
    def _c_below_k(self):
        if self.band:
            if (self.min_pass or 0.0) > (1.0 if self.max_pass is None else self.max_pass):
                raise ValueError(f"min_pass ({self.min_pass}) must be <= max_pass ({self.max_pass})")
            return self
        if self.c >= self.k:
            raise ValueError(f"c ({self.c}) must be < k ({self.k}): otherwise every prompt is 'hard'")
        return self

    @property
    def band(self) -> bool:
        return self.min_pass is not None or self.max_pass is not None

    @property
    def max_successes(self) -> int:
        """Most successes a kept prompt may have (sampling stops for a prompt beyond it)."""
        if not self.band:
            return self.c
        return self.k if self.max_pass is None else int(self.max_pass * self.k + 1e-9)

    def keeps(self, successes: int, drawn: int) -> bool:
        if not self.band:
            return successes <= self.c
        lo = 0.0 if self.min_pass is None else self.min_pass
        return drawn == self.k and lo * self.k - 1e-9 <= successes <= self.max_successes


def filter_pool(problems, engine, grade, tok, params: Params, seed: int, clip: list | None = None):
    """-> list of (problem, successes, samples drawn) for every prompt, early-stopped.
    ``clip`` (if given) gets [responses cut off by the budget, responses] added."""
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
            if clip is not None:
                clip[0] += sum(c.finish_reason == "length" for o in outs for c in o)
                clip[1] += sum(len(o) for o in outs)
            for p, o in zip(chunk, outs):
                succ[p.uid] += sum(next(scores)[0] > 0.5 for _ in o)
                drawn[p.uid] += len(o)
        rnd += 1
        active = [p for p in active if succ[p.uid] <= params.max_successes and drawn[p.uid] < params.k]
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
    out, hist, clip_ratio = {}, {}, {}
    try:
        for split, fname, cap, seed in (("train", "train_pool.jsonl", params.max_prompts, params.seed),
                                        ("heldout", "heldout_pool.jsonl", params.max_heldout, params.seed + 1)):
            pool = read_problems(pools_dir(ctx.input("data"), params.data_mixture) / fname)
            if cap == 0 or not pool:
                write_problems(ctx.out_dir / f"{split}.jsonl", [])
                out[split] = 0
                continue
            clip = [0, 0]
            with meter.tagged(split=split):
                res = filter_pool(pool, engine, grade, tok, params, seed, clip)
            clip_ratio[split] = clip[0] / clip[1] if clip[1] else 0.0
            kept = [replace(p, meta={**p.meta, "base_successes": s, "base_samples": d, "base_pass_rate": s / d})
                    for p, s, d in res if params.keeps(s, d)][:cap]
            out[split] = write_problems(ctx.out_dir / f"{split}.jsonl", kept)
            hist[split] = dict(sorted(Counter(min(s, params.max_successes + 1) for _, s, _ in res).items()))
            by_level = Counter(p.level for p in kept)
            ctx.tracker.log_metrics({f"{split}/kept": len(kept), f"{split}/pool": len(pool),
                                     f"{split}/clip_ratio": clip_ratio[split],
                                     **{f"{split}/kept_level_{k}": v for k, v in by_level.items()}})
    finally:
        grade.grader.close()
    tokens = meter.totals("filter")
    write_json(ctx.out_dir / "stats.json", {"kept": out, "successes_histogram": hist, "tokens": tokens,
                                            "k": params.k, "c": params.c, "clip_ratio": clip_ratio})
    (ctx.out_dir / "tokens.json").write_text(json.dumps(meter.to_rows()))
    if out.get("train", 0) == 0:
        if params.band:
            raise ValueError(f"filter_hard: no training prompt has a pass rate in [{params.min_pass}, "
                             f"{params.max_pass}] over {params.k} samples; use other pool_levels in prepare_data")
        raise ValueError(f"filter_hard: no training prompt has <= {params.c} successes in {params.k}; "
                         "use harder pool_levels in prepare_data or a weaker base policy")
    return {"kept_train": out.get("train", 0), "kept_heldout": out.get("heldout", 0),
            "filter_generated_tokens": tokens["generated_tokens"], "clip_ratio": clip_ratio}


def _keep_all(params: Params, ctx: StageContext) -> dict:
    from components.data.schema import read_problems, write_problems
    from components.stages.common import write_json

    out = {}
    for split, fname, cap in (("train", "train_pool.jsonl", params.max_prompts),
                              ("heldout", "heldout_pool.jsonl", params.max_heldout)):
        pools = pools_dir(ctx.input("data"), params.data_mixture)
        out[split] = write_problems(ctx.out_dir / f"{split}.jsonl", read_problems(pools / fname)[:cap])
    write_json(ctx.out_dir / "stats.json", {"kept": out, "keep_all": True})
    (ctx.out_dir / "tokens.json").write_text("[]")
    if out["train"] == 0:
        raise ValueError(f"filter_hard: {pools}/train_pool.jsonl has no problems")
    return {"kept_train": out["train"], "kept_heldout": out["heldout"], "filter_generated_tokens": 0}
