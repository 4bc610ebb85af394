"""Did RL training learn something, and does it carry over to prompts it never saw?

Samples ``k`` responses per prompt from the base policy and from each trained policy, on the
TRAINING prompts and on the HELD-OUT prompts of one ``filter_hard`` artifact, with the same
sampling seed for every model (common random numbers), and prints per model and split the
mean pass rate and its paired difference to the base policy with a 95 % bootstrap interval
over prompts. A policy that memorised its training prompts rises on ``train`` and stays flat on
``heldout``; a policy that learned nothing stays flat on both.

    .venv/bin/python bench/rl_generalization.py HARD_ARTIFACT BASE_MODEL_ARTIFACT TRAIN_ARTIFACT... \
        [--k 16] [--temperature 1.0] [--max-new-tokens 128] [--max-prompts 200]
      (artifacts: a filter_hard, a pretrain and train output directories of one store)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pass_rates(model, tok, problems, grade, k: int, temperature: float, max_new: int, seed: int):
    """Per-prompt share of ``k`` samples graded correct (one fixed sampling seed)."""
    from components.data.prompting import encode_prompt
    from components.engine.base import Request, SamplingParams
    from components.engine.hf import HFEngine

    engine = HFEngine(model, tok)
    out = []
    for i in range(0, len(problems), 64):
        chunk = problems[i:i + 64]
        reqs = [Request(encode_prompt(p, tok, "raw"), n=k, tag=p.uid) for p in chunk]
        comps = engine.generate(reqs, SamplingParams(temperature, 1.0, max_new, seed=seed + i), purpose="eval")
        scores = grade([c.text for cs in comps for c in cs], [p.answer for p, cs in zip(chunk, comps) for _ in cs])
        it = iter(scores)
        out.extend(sum(next(it)[0] > 0.5 for _ in cs) / len(cs) for cs in comps)
    return out


def paired_interval(diffs, reps: int = 4000, seed: int = 0) -> tuple[float, float]:
    import numpy as np

    d = np.asarray(diffs, dtype=float)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(reps, len(d)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hard")
    ap.add_argument("base")
    ap.add_argument("trained", nargs="+")
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--max-prompts", type=int, default=200)
    ap.add_argument("--seed", type=int, default=12345)
    a = ap.parse_args()

    import numpy as np
    import torch

    from components.data.schema import read_problems
    from components.stages.common import grade_fn, load_model

    torch.set_num_threads(1)
    splits = {s: read_problems(Path(a.hard) / f"{s}.jsonl")[: a.max_prompts] for s in ("train", "heldout")}
    grade = grade_fn()
    rates: dict[str, dict[str, list[float]]] = {}
    names = {"base": Path(a.base)}
    for d in a.trained:
        s = json.loads((Path(d) / "summary.json").read_text())
        names[f"{s['method']} s{s['seed']} ({s['steps']} upd)"] = Path(d)
    try:
        for name, d in names.items():
            model, tok = load_model(d)
            t0 = time.monotonic()
            rates[name] = {s: pass_rates(model, tok, ps, grade, a.k, a.temperature, a.max_new_tokens, a.seed)
                           for s, ps in splits.items()}
            print(f"[{name}: sampled in {time.monotonic() - t0:.0f}s]", file=sys.stderr, flush=True)
    finally:
        grade.grader.close()
    print(f"pass rate over {a.k} samples per prompt at T={a.temperature}, {a.max_new_tokens} new tokens; "
          f"{len(splits['train'])} training / {len(splits['heldout'])} held-out prompts of {a.hard}")
    print("| model | split | pass rate | Δ vs base [95% CI over prompts] |")
    print("|---|---|---|---|")
    for name, r in rates.items():
        for s in ("train", "heldout"):
            m = float(np.mean(r[s]))
            if name == "base":
                print(f"| {name} | {s} | {m:.3f} | |")
                continue
            diff = np.asarray(r[s]) - np.asarray(rates["base"][s])
            lo, hi = paired_interval(diff)
            print(f"| {name} | {s} | {m:.3f} | {diff.mean():+.3f} [{lo:+.3f}, {hi:+.3f}] |")


if __name__ == "__main__":
    main()
