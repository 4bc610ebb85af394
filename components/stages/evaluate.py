"""evaluate: accuracy of one policy on a held-out set, on every task.

The task (``task``) supplies the items and their samples (its ``evaluation`` /
``eval_samples``, ``components.stages.task_parts``): math samples ``samples_per_seed`` responses per held-out problem and
grades them; episodes play ``episodes_per_seed`` episodes per held-out map seed (the paper: 128
fixed seeds) and score success. The metrics are written once, here, with the same keys for
both, so the tables stage reads either unchanged.

Math:
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

Episodes: ``mean_at_k`` is the success rate, ``per_problem`` the success rate per map seed,
``pass_at_k`` is over a seed's episodes (k = 1 and all of them), ``maj_at_k`` the share of map
seeds solved by a strict majority of their episodes, ``clip_ratio`` the share of turns cut off
by ``max_new_tokens``; also the mean episode length in turns.
"""
from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

from pydantic import Field, field_validator, model_validator

from components.stages.base import Device, StageContext, TaskParams, check_engine_device
from components.budget import DEFAULT_RESPONSE_TOKENS

NAME = "evaluate"
VERSION = 2
TASKS = ("math", "agentic")
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


class Params(TaskParams):
    ADDED_FIELDS = ("benchmark", "protocol", "engine", "base_name", "task", "episodes_per_seed", "max_seeds", "device")
    TASK_DEFAULTS = {"agentic": {"seeds": [0], "temperature": 1.0, "max_new_tokens": 8, "pass_ks": None}}
    ONLY = {"split": "math", "samples_per_seed": "math", "max_problems": "math", "grading_timeout_s": "math",
            "benchmark": "math", "protocol": "math", "episodes_per_seed": "agentic", "max_seeds": "agentic"}
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
    pass_ks: list[int] | None = Field([1, 8, 16], description="None: 1 and all samples of an item")
    prompt_template: Literal["raw", "chat"] = "raw"
    grading_timeout_s: float = Field(5.0, gt=0)
    threads: int | None = None
    # A benchmark of components.data.benchmarks.benchmark_names() (math500, arith_levels, ...):
    # problems come from load_benchmark(benchmark) instead of the ``hard`` input's ``split`` (the input stays
    # wired by the DAG, unused then). None = the held-out split.
    benchmark: str | None = None
    protocol: Literal["vsr", "vigor", "vip"] | None = None
    engine: Literal["hf", "vllm"] = "hf"      # vllm: on a GPU, in the trainer image
    device: Device = "cpu"                    # engine hf: where the policy runs (auto: cuda when present)
    episodes_per_seed: int = Field(1, ge=1, description="agentic: episodes per map seed and sampling seed")
    max_seeds: int | None = Field(None, ge=1, description="agentic: evaluate on the first held-out map seeds only")

    @model_validator(mode="before")
    @classmethod
    def _apply_protocol(cls, data):
        if isinstance(data, dict) and data.get("protocol") in PROTOCOLS:
            data = {**PROTOCOLS[data["protocol"]], **data}
        return data

    @model_validator(mode="after")
    def _engine_device(self):
        check_engine_device(self.engine, self.device)
        return self

    @field_validator("benchmark")
    @classmethod
    def _known_benchmark(cls, v: str | None) -> str | None:
        from components.data.benchmarks import benchmark_names
        if v is not None and v not in benchmark_names():
            raise ValueError(f"unknown benchmark {v!r} (known: {', '.join(benchmark_names())})")
        return v


class Sample(NamedTuple):
    """One sample of an item as the task scored it."""
    correct: bool
    answer: Any                 # what maj@k votes over (the graded answer; None: no answer)
    record: dict                # its line in the task's records file
    turns: int = 1              # generated turns (a math response is one)
    clipped: int = 0            # of them, cut off by max_new_tokens
    tokens: int = 0             # generated tokens


def run(params: Params, ctx: StageContext) -> dict:
    import numpy as np

    from components.algos.metrics import pass_at_k
    from components.engine.base import SamplingParams, TokenMeter
    from components.stages.common import open_engine, set_threads, write_json
    from components.stages.task_parts import data_stages

    set_threads(params.threads)
    model_dir = ctx.input("model")
    train_summary = json.loads((model_dir / "summary.json").read_text()) if (model_dir / "summary.json").is_file() else {}
    task, items, n_per_seed = data_stages(params.task).evaluation(params, ctx)
    meter = TokenMeter(stage="evaluate", label=params.label)
    samples: dict[str, list[Sample]] = {uid: [] for uid, _ in items}
    per_seed = []
    try:
        engine, tok = open_engine(model_dir, meter, params.engine, params.device)
        with open(ctx.out_dir / task.EVAL_RECORDS, "w") as f:
            for seed in params.seeds:
                sp = SamplingParams(params.temperature, params.top_p, params.max_new_tokens, seed=seed)
                seed_correct = []
                for (uid, _), got in zip(items, task.eval_samples(engine, tok, [x for _, x in items], n_per_seed,
                                                                 sp, params)):
                    samples[uid] += got
                    seed_correct += [s.correct for s in got]
                    f.writelines(json.dumps(s.record) + "\n" for s in got)
                per_seed.append(float(np.mean(seed_correct)))
    finally:
        task.close()
    n = len(params.seeds) * n_per_seed
    correct = {u: [s.correct for s in v] for u, v in samples.items()}
    every = [s for v in samples.values() for s in v]
    ks = sorted({1, n}) if params.pass_ks is None else [k for k in params.pass_ks if k <= n]
    levels = {uid: getattr(x, "level", None) for uid, x in items}
    res = {
        "label": params.label, "method": train_summary.get("method", params.base_name),
        "train_seed": train_summary.get("seed"), "train_steps": train_summary.get("steps"),
        "split": params.split if params.benchmark is None else None, "benchmark": params.benchmark,
        "problems": len(items), "samples_per_problem": n,
        "mean_at_k": float(np.mean([np.mean(v) for v in correct.values()])),
        "mean_at_k_by_seed": per_seed,
        "pass_at_k": {str(k): float(np.mean([pass_at_k(n, sum(v), k) for v in correct.values()])) for k in ks},
        "maj_at_k": float(np.mean([task.majority(v) for v in samples.values()])),
        "by_level": {str(lv): float(np.mean([np.mean(correct[u]) for u, x in levels.items() if x == lv]))
                     for lv in sorted({x for x in levels.values() if x is not None})},
        "eval_tokens": meter.totals("eval"),
        # share of generated turns (responses) cut off by the budget (verl: response_length/clip_ratio)
        "clip_ratio": sum(s.clipped for s in every) / max(1, sum(s.turns for s in every)),
        "response_length_mean": float(np.mean([s.tokens for s in every])),
        "max_new_tokens": params.max_new_tokens,
        # accuracy per item (over all its samples): what the tables bootstrap over
        "per_problem": {u: float(np.mean(v)) for u, v in correct.items()},
    }
    fields, metrics = task.eval_fields(every)
    res.update(fields)
    if params.device != "cpu":
        res["device"] = str(next(engine.model.parameters()).device)
    write_json(ctx.out_dir / "results.json", res)
    ctx.tracker.log_metrics({"eval/mean_at_k": res["mean_at_k"], "eval/maj_at_k": res["maj_at_k"],
                             "eval/clip_ratio": res["clip_ratio"],
                             **{f"eval/pass_at_{k}": v for k, v in res["pass_at_k"].items()}, **metrics})
    return {k: res[k] for k in ("label", "method", "mean_at_k", "maj_at_k", "pass_at_k", "clip_ratio")}
