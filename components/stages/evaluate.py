"""evaluate: accuracy of one policy on a held-out set.

The VSR paper's protocol by default: 16 samples per prompt over 2 seeds (``samples_per_seed``
x ``seeds``) at temperature 0.7; reports mean@k (mean accuracy, also per seed so the
tables can show the spread), unbiased pass@k for each ``pass_ks`` (Chen et al. 2021),
and maj@k (majority vote over the answers as the grader extracts them: boxes listed together
vote as one multi-part answer). With ``benchmark`` set, the problems are
that benchmark's (``components.data.benchmarks.load_benchmark``) instead of the ``hard``
input's split (``arith_levels``, the embedded task's unfiltered benchmark, is refused when it
shares a problem with the ``hard`` input's training file); real models use
``prompt_template="chat"``. The model input is either the base policy (``pretrain``) or a
``train`` output; ``label`` names the row in the tables.
"""
from __future__ import annotations

import json
from typing import Literal

from pydantic import Field, field_validator, model_validator

from components.stages.base import StageContext, StageParams
from components.budget import DEFAULT_RESPONSE_TOKENS

NAME = "evaluate"
VERSION = 2
INPUTS = ("model", "hard")


# The papers' evaluation protocols. ``protocol: <name>`` fills these fields unless the sweep
# sets them explicitly (an explicit value wins and is what the cache key records).
PROTOCOLS: dict[str, dict] = {
    # VSR §5: 16 samples over 2 seeds at temperature 0.7, mean accuracy (top-p not stated)
    "vsr": {"samples_per_seed": 8, "seeds": [0, 1], "temperature": 0.7, "top_p": 1.0, "pass_ks": [1, 16]},
    # VIGOR, validation: one sample per prompt, top-p 0.7, temperature 1.0
    "vigor": {"samples_per_seed": 1, "seeds": [0], "temperature": 1.0, "top_p": 0.7, "pass_ks": [1]},
    # VIP: Pass@32 / Mean@32 / Maj@32 (temperature and top-p not stated: 1.0 / 1.0 are ours)
    "vip": {"samples_per_seed": 32, "seeds": [0], "temperature": 1.0, "top_p": 1.0, "pass_ks": [1, 32]},
}


class Params(StageParams):
    ADDED_FIELDS = ("benchmark", "protocol", "engine", "base_name")
    label: str = "base"
    # the tables' row name of a model that no train stage produced (a base policy; a teacher)
    base_name: str = "base"
    split: Literal["heldout", "train"] = "heldout"
    samples_per_seed: int = Field(8, ge=1)
    seeds: list[int] = [0, 1]
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(DEFAULT_RESPONSE_TOKENS, ge=1)
    max_problems: int | None = Field(None, ge=1)
    pass_ks: list[int] = [1, 8, 16]
    prompt_template: Literal["raw", "chat"] = "raw"
    grading_timeout_s: float = Field(5.0, gt=0)
    threads: int | None = None
    # A benchmark of components.data.benchmarks.benchmark_names() (math500, arith_levels, ...):
    # problems come from load_benchmark(benchmark) instead of the ``hard`` input's ``split`` (the input stays
    # wired by the DAG, unused then). None = the held-out split.
    benchmark: str | None = None
    protocol: Literal["vsr", "vigor", "vip"] | None = None
    engine: Literal["hf", "vllm"] = "hf"      # vllm: on a GPU, in the trainer image

    @model_validator(mode="before")
    @classmethod
    def _apply_protocol(cls, data):
        if isinstance(data, dict) and data.get("protocol") in PROTOCOLS:
            data = {**PROTOCOLS[data["protocol"]], **data}
        return data

    @field_validator("benchmark")
    @classmethod
    def _known_benchmark(cls, v: str | None) -> str | None:
        from components.data.benchmarks import benchmark_names
        if v is not None and v not in benchmark_names():
            raise ValueError(f"unknown benchmark {v!r} (known: {', '.join(benchmark_names())})")
        return v


def run(params: Params, ctx: StageContext) -> dict:
    import numpy as np

    from components.algos.metrics import maj_at_k, pass_at_k
    from components.data.prompting import encode_prompt
    from components.data.schema import read_problems
    from components.engine.base import Request, SamplingParams, TokenMeter
    from components.reward.grader import extract_answer
    from components.stages.common import grade_fn, open_engine, set_threads, write_json

    set_threads(params.threads)
    model_dir = ctx.input("model")
    train_summary = json.loads((model_dir / "summary.json").read_text()) if (model_dir / "summary.json").is_file() else {}
    if params.benchmark is not None:
        from components.data import arith_benchmark
        from components.data.benchmarks import load_benchmark
        problems = list(load_benchmark(params.benchmark))[: params.max_problems]
        if not problems:
            raise ValueError(f"evaluate: benchmark {params.benchmark!r} has no problems")
        if params.benchmark == arith_benchmark.NAME:  # the embedded task's: never scored after training on it
            arith_benchmark.check_disjoint(problems, read_problems(ctx.input("hard") / "train.jsonl"),
                                           f"{ctx.input('hard')}/train.jsonl")
    else:
        problems = read_problems(ctx.input("hard") / f"{params.split}.jsonl")[: params.max_problems]
        if not problems:
            raise ValueError(f"evaluate: {ctx.input('hard')}/{params.split}.jsonl has no problems")
    meter = TokenMeter(stage="evaluate", label=params.label)
    engine, tok = open_engine(model_dir, meter, params.engine)
    grade = grade_fn(params.grading_timeout_s)
    correct = {p.uid: [] for p in problems}
    answers = {p.uid: [] for p in problems}
    per_seed, clipped, lengths = [], 0, []
    try:
        with open(ctx.out_dir / "samples.jsonl", "w") as f:
            for seed in params.seeds:
                reqs = [Request(encode_prompt(p, tok, params.prompt_template), n=params.samples_per_seed, tag=p.uid)
                        for p in problems]
                outs = engine.generate(reqs, SamplingParams(params.temperature, params.top_p,
                                                            params.max_new_tokens, seed=seed), purpose="eval")
                texts = [c.text for o in outs for c in o]
                clipped += sum(c.finish_reason == "length" for o in outs for c in o)
                lengths += [len(c.token_ids) for o in outs for c in o]
                scores = iter(grade(texts, [p.answer for p, o in zip(problems, outs) for _ in o]))
                seed_correct = []
                for p, o in zip(problems, outs):
                    for c in o:
                        s, reason = next(scores)
                        correct[p.uid].append(s > 0.5)
                        answers[p.uid].append(extract_answer(c.text))  # the answer as graded: several boxes vote as one
                        seed_correct.append(s > 0.5)
                        f.write(json.dumps({"uid": p.uid, "seed": seed, "text": c.text, "score": s,
                                            "reason": reason}) + "\n")
                per_seed.append(float(np.mean(seed_correct)))
    finally:
        grade.grader.close()
    n = len(params.seeds) * params.samples_per_seed
    res = {
        "label": params.label, "method": train_summary.get("method", params.base_name),
        "train_seed": train_summary.get("seed"), "train_steps": train_summary.get("steps"),
        "split": params.split if params.benchmark is None else None, "benchmark": params.benchmark,
        "problems": len(problems), "samples_per_problem": n,
        "mean_at_k": float(np.mean([np.mean(v) for v in correct.values()])),
        "mean_at_k_by_seed": per_seed,
        "pass_at_k": {str(k): float(np.mean([pass_at_k(n, sum(v), k) for v in correct.values()]))
                      for k in params.pass_ks if k <= n},
        "maj_at_k": float(np.mean([maj_at_k(answers[u], correct[u]) for u in correct])),
        "by_level": {str(lv): float(np.mean([np.mean(correct[p.uid]) for p in problems if p.level == lv]))
                     for lv in sorted({p.level for p in problems if p.level is not None})},
        "eval_tokens": meter.totals("eval"),
        # share of responses cut off by the budget (verl: response_length/clip_ratio)
        "clip_ratio": clipped / len(lengths), "response_length_mean": float(np.mean(lengths)),
        "max_new_tokens": params.max_new_tokens,
        # accuracy per problem (over all its samples): what the tables bootstrap over
        "per_problem": {u: float(np.mean(v)) for u, v in correct.items()},
    }
    write_json(ctx.out_dir / "results.json", res)
    ctx.tracker.log_metrics({"eval/mean_at_k": res["mean_at_k"], "eval/maj_at_k": res["maj_at_k"],
                             "eval/clip_ratio": res["clip_ratio"],
                             **{f"eval/pass_at_{k}": v for k, v in res["pass_at_k"].items()}})
    return {k: res[k] for k in ("label", "method", "mean_at_k", "maj_at_k", "pass_at_k", "clip_ratio")}
