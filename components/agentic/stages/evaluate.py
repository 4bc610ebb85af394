"""evaluate (agentic): success rate on the fixed held-out map seeds (the paper: 128 per
environment), ``episodes_per_seed`` episodes per seed for each sampling seed in ``seeds``.

``results.json`` has the math evaluate stage's keys, so the tables stage reads it unchanged:
``mean_at_k`` = success rate, ``per_problem`` = success rate per map seed, ``pass_at_k``
(unbiased, over a seed's episodes), ``maj_at_k`` = share of map seeds solved by a majority of
their episodes, ``clip_ratio`` = share of turns cut off by ``max_new_tokens``. Also the mean
episode length (turns) and generated tokens per episode.
"""
from __future__ import annotations

import json
from typing import Literal

from pydantic import Field

from components.stages.base import StageContext, StageParams

NAME = "evaluate"
VERSION = 1
INPUTS = ("model", "hard")


class Params(StageParams):
    task: Literal["agentic"] = "agentic"
    label: str = "base"
    episodes_per_seed: int = Field(1, ge=1)
    seeds: list[int] = [0]
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(8, ge=1)
    max_seeds: int | None = Field(None, ge=1)
    threads: int | None = None
    engine: Literal["hf", "vllm"] = "hf"      # vllm: on a GPU, in the trainer image
    prompt_template: Literal["raw", "chat"] = "raw"


def run(params: Params, ctx: StageContext) -> dict:
    import numpy as np

    from components.agentic.rollout import Start, prompt_encoder, rollout_episodes
    from components.agentic.stages.common import env_factory, read_env
    from components.algos.metrics import pass_at_k
    from components.engine.base import SamplingParams, TokenMeter
    from components.stages.common import open_engine, read_json, set_threads, write_json

    set_threads(params.threads)
    model_dir = ctx.input("model")
    summary_file = model_dir / "summary.json"
    train_summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    make = env_factory(read_env(ctx.input("hard")))
    seeds = [r["seed"] for r in read_json(ctx.input("hard") / "heldout.json")][: params.max_seeds]
    if not seeds:
        raise ValueError(f"evaluate: {ctx.input('hard')}/heldout.json has no map seeds")
    meter = TokenMeter(stage="evaluate", label=params.label)
    engine, tok = open_engine(model_dir, meter, params.engine)
    won = {s: [] for s in seeds}
    per_seed, turns, gen, clipped = [], [], [], 0
    with open(ctx.out_dir / "episodes.jsonl", "w") as f:
        for sampling_seed in params.seeds:
            runs = rollout_episodes(engine, make, [Start(s, (), str(s), params.episodes_per_seed) for s in seeds],
                                    SamplingParams(params.temperature, params.top_p, params.max_new_tokens,
                                                   sampling_seed), purpose="eval",
                                    encode=prompt_encoder(tok, params.prompt_template))
            for r in runs:
                won[r.start.seed].append(r.won)
                turns.append(len(r.turns))
                gen.append(r.generated_tokens)
                clipped += sum(t.finish_reason == "length" for t in r.turns)
                f.write(json.dumps({"seed": r.start.seed, "sampling_seed": sampling_seed, "won": r.won,
                                    "actions": list(r.actions), "return": r.episode_return}) + "\n")
            per_seed.append(float(np.mean([r.won for r in runs])))
    n = len(params.seeds) * params.episodes_per_seed
    res = {
        "label": params.label, "method": train_summary.get("method", "base"),
        "train_seed": train_summary.get("seed"), "train_steps": train_summary.get("steps"),
        "split": "heldout", "benchmark": None, "task": "agentic", "env": read_env(ctx.input("hard")),
        "problems": len(seeds), "samples_per_problem": n,
        "mean_at_k": float(np.mean([np.mean(v) for v in won.values()])),
        "mean_at_k_by_seed": per_seed,
        "pass_at_k": {str(k): float(np.mean([pass_at_k(n, sum(v), k) for v in won.values()]))
                      for k in sorted({1, n})},
        "maj_at_k": float(np.mean([sum(v) * 2 > len(v) for v in won.values()])),
        "by_level": {}, "eval_tokens": meter.totals("eval"),
        "clip_ratio": clipped / max(1, sum(turns)), "response_length_mean": float(np.mean(gen)),
        "episode_turns_mean": float(np.mean(turns)), "max_new_tokens": params.max_new_tokens,
        "per_problem": {str(s): float(np.mean(v)) for s, v in won.items()},
    }
    write_json(ctx.out_dir / "results.json", res)
    ctx.tracker.log_metrics({"eval/success_rate": res["mean_at_k"], "eval/episode_turns": res["episode_turns_mean"],
                             "eval/clip_ratio": res["clip_ratio"]})
    return {k: res[k] for k in ("label", "method", "mean_at_k", "maj_at_k", "pass_at_k", "clip_ratio")}
