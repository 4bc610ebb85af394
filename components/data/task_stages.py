"""The math task's part of the data stages: problem pools (prepare_data), the tiny base policy
(pretrain), the early-stopped hard filter (filter_hard), verified expert traces (seed_prefixes)
and graded samples (evaluate). ``components.trainer.task.MathTask``
inherits these hooks; the stage modules in ``components.stages`` hold the params and the rest.
It imports no trainer, so the data stages' code fingerprint stays their own."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

from components.data.mixtures import pools_dir, split_pools, write_mixtures
from components.data.prompting import encode_prompt
from components.data.schema import read_problems, write_problems
from components.engine.base import Request, SamplingParams, TokenMeter
from components.stages.common import grade_fn, make_engine, open_engine, set_threads, write_json


class ProblemStages:
    """The data-stage hooks of a task whose items are problems (``components.data.schema``),
    graded by ``grade`` (None where the backend grades: verl's reward workers)."""
    EVAL_RECORDS = "samples.jsonl"

    def __init__(self, grade=None):
        self.grade = grade

    def close(self) -> None:
        """Stop the grader's worker processes."""
        if self.grade is not None and hasattr(self.grade, "grader"):
            self.grade.grader.close()

    @staticmethod
    def prepare_data(params, ctx) -> dict:
        """``synthetic``: generated pools; a real source: a dataset split into the pools."""
        return write_pools(params, ctx)

    @staticmethod
    def filter_hard(params, ctx) -> dict:
        return _keep_all(params, ctx) if params.keep_all else filter_hard(params, ctx)

    @classmethod
    def evaluation(cls, params, ctx):
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
        return cls(grade_fn(params.grading_timeout_s)), [(p.uid, p) for p in problems], params.samples_per_seed

    def eval_samples(self, engine, tok, problems, n, sampling, params) -> list[list]:
        from components.reward.grader import extract_answer
        from components.stages.evaluate import Sample

        reqs = [Request(encode_prompt(p, tok, params.prompt_template), n=n, tag=p.uid) for p in problems]
        outs = engine.generate(reqs, sampling, purpose="eval")
        scores = iter(self.grade([c.text for o in outs for c in o], [p.answer for p, o in zip(problems, outs) for _ in o]))
        got = []
        for p, o in zip(problems, outs):
            row = []
            for c in o:
                s, reason = next(scores)
                # the answer as graded: several boxes vote as one
                row.append(Sample(s > 0.5, extract_answer(c.text),
                                  {"uid": p.uid, "seed": sampling.seed, "text": c.text, "score": s, "reason": reason},
                                  clipped=int(c.finish_reason == "length"), tokens=len(c.token_ids)))
            got.append(row)
        return got

    @staticmethod
    def majority(samples) -> bool:
        from components.algos.metrics import maj_at_k

        return maj_at_k([s.answer for s in samples], [s.correct for s in samples])

    @staticmethod
    def eval_fields(samples) -> tuple[dict, dict]:
        """No fields of math's own beyond the shared ones."""
        return {}, {}

    @staticmethod
    def seed_prefixes(params, ctx) -> dict:
        """One verified expert trace per hard prompt: ``sft.jsonl``, ``traces.json`` and the
        expert prefix states at ``cut_fractions`` (``prefix_pool.jsonl``)."""
        hard = read_problems(ctx.input("hard") / "train.jsonl")
        grade = grade_fn(params.grading_timeout_s)
        try:
            cands = [(p, t) for p in hard for t in p.traces]
            scores = grade([t for _, t in cands], [p.answer for p, _ in cands]) if cands else []
        finally:
            grade.grader.close()
        chosen: dict[str, list[str]] = {}
        rejected = 0
        for (p, t), (s, _) in zip(cands, scores):
            if s > 0.5 and len(chosen.setdefault(p.uid, [])) < params.traces_per_prompt:
                chosen[p.uid].append(t)
            elif s <= 0.5:
                rejected += 1
        sft = [replace(p, traces=tuple(chosen[p.uid])) for p in hard if chosen.get(p.uid)]
        write_problems(ctx.out_dir / "sft.jsonl", sft)
        write_json(ctx.out_dir / "traces.json", {p.uid: p.traces[0] for p in sft})
        with open(ctx.out_dir / "prefix_pool.jsonl", "w") as f:
            for p in sft:
                trace = p.traces[0]
                for frac in params.cut_fractions:
                    cut = int(round(frac * len(trace)))
                    f.write(json.dumps({"uid": p.uid, "alpha": frac, "prefix": trace[:cut]}) + "\n")
        # trace lengths, to check against the sweep's response budget (for the character tokenizer
        # of the embedded demo a character is a token; the policy also samples an EOS)
        lengths = sorted(len(p.traces[0]) for p in sft)
        summary = {"hard_prompts": len(hard), "seeded_prompts": len(sft), "rejected_traces": rejected,
                   "no_trace": len(hard) - len(sft),
                   "trace_chars_median": lengths[len(lengths) // 2] if lengths else 0,
                   "trace_chars_max": lengths[-1] if lengths else 0}
        ctx.tracker.log_metrics({k: float(v) for k, v in summary.items()})
        if not sft:
            raise ValueError(f"seed_prefixes: none of the {len(hard)} hard prompts has a verified expert trace")
        return summary

    @staticmethod
    def pretrain(params, ctx) -> dict:
        """On the expert traces of the easy problems; then the base pass rate per level at
        temperature 1 on prepare_data's probe set (never trained on)."""
        import numpy as np

        from components.policy.tokenizer import build_tokenizer
        from components.stages.pretrain import train_base_policy

        problems = read_problems(ctx.input("data") / "pretrain.jsonl")
        tok = build_tokenizer()
        model, info = train_base_policy(params, ctx, tok, problems)
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
        return {**info, "base_pass_rate": rates, "probe_clip_ratio": clip}


def _write_pools(ctx, **pools) -> dict[str, int]:
    """``<name>.jsonl`` per pool in the stage's output; the rows written, by name."""
    return {name: write_problems(ctx.out_dir / f"{name}.jsonl", problems) for name, problems in pools.items()}


def write_pools(params, ctx) -> dict:
    if params.source != "synthetic":
        return read_real(params, ctx)
    from components.data.synthetic import generate_problems

    p = params
    pretrain = generate_problems(p.pretrain_size, p.pretrain_levels, seed=p.seed * 3 + 0,
                                 operand_digits=p.operand_digits, source="synthetic-pretrain")
    used = {x.uid for x in pretrain}
    pool = generate_problems(p.pool_size, p.pool_levels, seed=p.seed * 3 + 1, operand_digits=p.operand_digits,
                             source="synthetic-train", exclude=used)
    used |= {x.uid for x in pool}
    heldout = generate_problems(p.heldout_pool_size, p.pool_levels, seed=p.seed * 3 + 2,
                                operand_digits=p.operand_digits, source="synthetic-heldout", exclude=used)
    used |= {x.uid for x in heldout}
    probe = [x for i, lv in enumerate(p.probe_levels)
             for x in generate_problems(p.probe_per_level, [lv], seed=p.seed * 3 + 1000 + i,
                                        operand_digits=p.operand_digits, source="synthetic-probe", exclude=used)]
    counts = _write_pools(ctx, pretrain=pretrain, train_pool=pool, heldout_pool=heldout, probe=probe)
    (ctx.out_dir / "stats.json").write_text(json.dumps(counts, indent=2))
    ctx.tracker.log_metrics({f"rows/{k}": v for k, v in counts.items()})
    return counts


def read_real(p, ctx) -> dict:
    from components.data.loaders import LOADERS

    problems = LOADERS[p.source](p.path, on_error=p.on_error, limit=p.limit)
    if not problems:
        raise ValueError(f"prepare_data: {p.path}: no problems loaded ({problems.report})")
    pool, heldout = split_pools(problems, p.heldout_fraction, p.seed)
    counts = _write_pools(ctx, pretrain=[], train_pool=pool, heldout_pool=heldout, probe=[])
    rep = problems.report
    report = {k: v for k, v in vars(rep).items() if k != "errors"}
    (ctx.out_dir / "stats.json").write_text(json.dumps({**counts, "load": report, "errors": rep.errors},
                                                       indent=2))
    ctx.tracker.log_metrics({**{f"rows/{k}": v for k, v in counts.items()},
                             **{f"load/{k}": v for k, v in report.items() if isinstance(v, (int, float))}})
    mixed = write_mixtures(p.mixtures, ctx.out_dir, heldout_fraction=p.heldout_fraction, seed=p.seed,
                           on_error=p.on_error)
    if mixed:
        ctx.tracker.log_metrics({f"rows/{k}": v for k, v in mixed.items()})
    return {**counts, **mixed, "skipped": rep.skipped, "filtered": rep.filtered}


def filter_pool(problems, engine, grade, tok, params, seed: int, clip: list | None = None):
    """-> list of (problem, successes, samples drawn) for every prompt, early-stopped.
    ``clip`` (if given) gets [responses cut off by the budget, responses] added."""
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


def filter_hard(params, ctx) -> dict:
    set_threads(params.threads)
    meter = TokenMeter(stage="filter_hard")
    engine, tok = open_engine(ctx.input("model"), meter, params.engine, params.device)
    grade = grade_fn()
    out, hist, clip_ratio = {}, {}, {}
    try:
        for split, fname, cap, seed in (("train", "train_pool.jsonl", params.max_prompts, params.seed),
                                        ("heldout", "heldout_pool.jsonl", params.max_heldout, params.seed + 1)):
            pool = read_problems(pools_dir(ctx.input("data"), params.data_mixture) / fname)
            if cap == 0 or not pool:
                out[split] = write_problems(ctx.out_dir / f"{split}.jsonl", [])
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


def _keep_all(params, ctx) -> dict:
    out = {}
    pools = pools_dir(ctx.input("data"), params.data_mixture)
    for split, fname, cap in (("train", "train_pool.jsonl", params.max_prompts),
                              ("heldout", "heldout_pool.jsonl", params.max_heldout)):
        out[split] = write_problems(ctx.out_dir / f"{split}.jsonl", read_problems(pools / fname)[:cap])
    write_json(ctx.out_dir / "stats.json", {"kept": out, "keep_all": True})
    (ctx.out_dir / "tokens.json").write_text("[]")
    if out["train"] == 0:
        raise ValueError(f"filter_hard: {pools}/train_pool.jsonl has no problems")
    return {"kept_train": out["train"], "kept_heldout": out["heldout"], "filter_generated_tokens": 0}
