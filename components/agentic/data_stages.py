"""The episodic task's part of the data stages: map-seed pools and ``env.json``
(prepare_data), the behaviour-cloned base policy (pretrain), successes in ``k`` episodes
(filter_hard), the expert's episodes (seed_prefixes) and scored episodes (evaluate).
``components.agentic.task.EpisodeTask`` takes these hooks; this module imports no trainer,
so the data stages' code fingerprint stays their own."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from components.agentic.rollout import Start, prompt_encoder, rollout_episodes, success_rate
from components.engine.base import SamplingParams

# map seeds of prepare_data: train pool from 0, demonstrations and held-out ones at these offsets
PRETRAIN_OFFSET, HELDOUT_OFFSET = 1_000_000, 2_000_000


class EpisodeStages:
    """The data-stage hooks of a task whose items are map seeds of an environment."""

    def __init__(self, make_env: Callable | None = None, env: dict[str, Any] | None = None):
        self.make_env, self.env = make_env, env        # env: the environment's spec

    def close(self) -> None:
        """Nothing to release."""

    EVAL_RECORDS = "episodes.jsonl"

    @staticmethod
    def prepare_data(params, ctx) -> dict:
        """``env.json`` and the disjoint map-seed ranges of ``seeds.json``."""
        from components.envs.spec import env_factory, env_spec, write_env
        from components.stages.common import write_json

        spec = env_spec(params.env, params.env_config)
        make = env_factory(spec)
        seeds = {"pretrain": [PRETRAIN_OFFSET + i for i in range(params.pretrain_seeds)],
                 "train_pool": list(range(params.train_pool)),
                 "heldout": [HELDOUT_OFFSET + i for i in range(params.heldout)]}
        first = make().reset(seeds["train_pool"][0])    # the generator/level set works at all
        write_env(ctx.out_dir, spec)
        write_json(ctx.out_dir / "seeds.json", seeds)
        return {"env": params.env, **{k: len(v) for k, v in seeds.items()}, "first_prompt_chars": len(first)}

    @staticmethod
    def filter_hard(params, ctx) -> dict:
        """``k`` episodes per train-pool seed (all of them: the histogram is exact); the
        held-out seeds pass unfiltered."""
        import json
        from collections import Counter

        from components.engine.base import TokenMeter
        from components.envs.spec import env_factory, read_env, write_env
        from components.stages.common import open_engine, read_json, write_json

        spec = read_env(ctx.input("data"))
        make = env_factory(spec)
        seeds = read_json(ctx.input("data") / "seeds.json")
        pool, heldout = seeds["train_pool"], [{"seed": s} for s in seeds["heldout"]]
        write_env(ctx.out_dir, spec)
        write_json(ctx.out_dir / "heldout.json", heldout)
        if params.keep_all:
            kept = [{"seed": s, "base_successes": None, "base_samples": 0, "base_pass_rate": None}
                    for s in pool][: params.max_prompts]
            write_json(ctx.out_dir / "train.json", kept)
            write_json(ctx.out_dir / "stats.json", {"kept": len(kept), "keep_all": True})
            (ctx.out_dir / "tokens.json").write_text("[]")
            return {"kept_train": len(kept), "kept_heldout": len(heldout), "filter_generated_tokens": 0}
        meter = TokenMeter(stage="filter_hard")
        engine, tok = open_engine(ctx.input("model"), meter, params.engine, params.device)
        runs = rollout_episodes(engine, make, [Start(s, (), str(s), params.k) for s in pool],
                                SamplingParams(params.temperature, params.top_p, params.max_new_tokens, params.seed),
                                purpose="filter", encode=prompt_encoder(tok, params.prompt_template))
        wins = Counter(r.start.seed for r in runs if r.won)
        kept = [{"seed": s, "base_successes": wins[s], "base_samples": params.k, "base_pass_rate": wins[s] / params.k}
                for s in pool if params.min_successes <= wins[s] <= params.c][: params.max_prompts]
        write_json(ctx.out_dir / "train.json", kept)
        hist = dict(sorted(Counter(wins[s] for s in pool).items()))
        tokens = meter.totals("filter")
        pool_success = sum(wins.values()) / (len(pool) * params.k)
        write_json(ctx.out_dir / "stats.json", {"kept": len(kept), "pool": len(pool), "successes_histogram": hist,
                                                "k": params.k, "c": params.c, "tokens": tokens,
                                                "pool_success": pool_success})
        (ctx.out_dir / "tokens.json").write_text(json.dumps(meter.to_rows()))
        ctx.tracker.log_metrics({"train/kept": len(kept), "train/pool": len(pool), "train/pool_success": pool_success})
        if not kept:
            raise ValueError(f"filter_hard: no map seed has {params.min_successes}..{params.c} successes in "
                             f"{params.k} episodes (histogram {hist}); change c/min_successes or the environment")
        return {"kept_train": len(kept), "kept_heldout": len(heldout),
                "filter_generated_tokens": tokens["generated_tokens"],
                "successes_histogram": {str(k): v for k, v in hist.items()}}

    @classmethod
    def evaluation(cls, params, ctx) -> tuple["EpisodeStages", list, int]:
        from components.envs.spec import env_factory, read_env
        from components.stages.common import read_json

        hard = ctx.input("hard")
        seeds = [r["seed"] for r in read_json(hard / "heldout.json")][: params.max_seeds]
        if not seeds:
            raise ValueError(f"evaluate: {hard}/heldout.json has no map seeds")
        spec = read_env(hard)
        return cls(env_factory(spec), env=spec), [(str(s), s) for s in seeds], params.episodes_per_seed

    def eval_samples(self, engine, tok, seeds, n, sampling, params) -> list[list]:
        from components.stages.evaluate import Sample

        runs = rollout_episodes(engine, self.make_env, [Start(s, (), str(s), n) for s in seeds], sampling,
                                purpose="eval", encode=prompt_encoder(tok, params.prompt_template))
        return [[Sample(r.won, r.won, {"seed": r.start.seed, "sampling_seed": sampling.seed, "won": r.won,
                                       "actions": list(r.actions), "return": r.episode_return},
                        turns=len(r.turns), clipped=sum(t.finish_reason == "length" for t in r.turns),
                        tokens=r.generated_tokens) for r in runs[i * n:(i + 1) * n]] for i in range(len(seeds))]

    @staticmethod
    def majority(samples) -> bool:
        """Solved by a strict majority of the seed's episodes."""
        return sum(s.correct for s in samples) * 2 > len(samples)

    def eval_fields(self, samples) -> tuple[dict[str, Any], dict[str, float]]:
        turns = float(np.mean([s.turns for s in samples]))
        return ({"task": "agentic", "env": self.env, "episode_turns_mean": turns},
                {"eval/success_rate": float(np.mean([s.correct for s in samples])), "eval/episode_turns": turns})

    @staticmethod
    def seed_prefixes(params, ctx) -> dict:
        """No expert trajectories unless ``expert_episodes``: then the environment expert's
        solved episode (action texts) per kept map seed."""
        from components.agentic.bc import expert_action
        from components.envs.spec import env_factory, read_env
        from components.stages.common import read_json, write_json

        traces = {}
        if params.expert_episodes:
            make = env_factory(read_env(ctx.input("hard")))
            for row in read_json(ctx.input("hard") / "train.json"):
                env, actions, done, info = make(), [], False, {"won": False}
                env.reset(row["seed"])
                while not done and (a := expert_action(env)) is not None:
                    actions.append(a)
                    _, _, done, info = env.step(a)
                if info["won"]:
                    traces[str(row["seed"])] = actions
        write_json(ctx.out_dir / "traces.json", traces)
        return {"expert_episodes": len(traces)}

    @staticmethod
    def pretrain(params, ctx) -> dict:
        """Behaviour cloning of a noisy expert on the ``pretrain`` map seeds; then the base
        success rate on the first ``probe_seeds`` train-pool seeds (one episode each, temperature 1)."""
        from components.agentic.bc import demonstrations
        from components.agentic.policy import build_agent_tokenizer
        from components.envs.spec import env_factory, read_env, write_env
        from components.engine.base import TokenMeter
        from components.stages.common import make_engine, read_json, write_json
        from components.stages.pretrain import train_base_policy

        spec = read_env(ctx.input("data"))
        make = env_factory(spec)
        seeds = read_json(ctx.input("data") / "seeds.json")
        demos, demo_stats = demonstrations(make, seeds["pretrain"], params.noise, params.seed)
        tok = build_agent_tokenizer(max_positions=params.policy.max_positions)
        model, info = train_base_policy(params, ctx, tok, demos)
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
        return {**info, **demo_stats, "base_success": rates}
