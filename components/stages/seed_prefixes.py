"""seed_prefixes: one verified expert trace per hard prompt.

The trace must end in a ``\\boxed{}`` answer that math-verify grades correct against
the gold (for OpenR1 data, also ``is_reasoning_complete``). Outputs:
- ``sft.jsonl``: the SFT set — exactly the hard prompts with their one expert trace;
- ``traces.json``: uid -> trace, what VSR seeds its buffer with (cut by its own config);
- ``prefix_pool.jsonl``: the expert prefix states at ``cut_fractions`` (the static pool
  for expert-prefix resets; also a readable view of what gets replayed).
"""
from __future__ import annotations

import json
from dataclasses import replace

from pydantic import Field

from components.stages.base import StageContext, StageParams

NAME = "seed_prefixes"
VERSION = 2
INPUTS = ("hard",)


class Params(StageParams):
    traces_per_prompt: int = Field(1, ge=1)
    cut_fractions: list[float] = [0.25, 0.5, 0.75]
    grading_timeout_s: float = Field(5.0, gt=0)


def run(params: Params, ctx: StageContext) -> dict:
    from components.data.schema import read_problems, write_problems
    from components.stages.common import grade_fn, write_json

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
               "no_trace": len(hard) - len(sft), "trace_chars_median": lengths[len(lengths) // 2] if lengths else 0,
               "trace_chars_max": lengths[-1] if lengths else 0}
    ctx.tracker.log_metrics({k: float(v) for k, v in summary.items()})
    if not sft:
        raise ValueError(f"seed_prefixes: none of the {len(hard)} hard prompts has a verified expert trace")
    return summary
