"""Generated tokens/s of the rollout engines on the same requests, in the same run.

Engines (``--engines``, comma-separated, in order):
  model.generate  plain ``model.generate(do_sample=True)`` on the padded batch (each prompt
                  repeated n times): the baseline the embedded engine is measured against
  engine          the embedded transformers engine (components/engine/hf.py): one prefill per
                  prompt, its KV cache shared by the n samples, finished rows dropped
  vllm            vLLM's engine (components/engine/vllm.py; the CPU build in .venv-scale)

Requests: ``--prompts`` prompts x ``--n`` samples, temperature 1, up to ``--max-new`` tokens.
The tiny policy's prompts are synthetic chains (``--model`` a tiny-policy dir or stage
artifact; none = freshly initialised); ``--math500`` takes MATH500's first problems in the
chat template instead (a real model: ``--model`` a pretrain artifact with model_ref.json or an
HF directory). Prints the median of ``--repeats`` runs per engine and the ratios to the first.

    .venv/bin/python bench/engine_throughput.py --model .rlvr/artifacts/pretrain/<key>
    .venv-scale/bin/python bench/engine_throughput.py --engines engine,vllm --model <tiny pretrain artifact>
    .venv-scale/bin/python bench/engine_throughput.py --engines engine,vllm --model <SmolLM2 pretrain artifact> \
        --math500 --prompts 16 --n 4 --max-new 256
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from components.engine.base import Request, SamplingParams, TokenMeter  # noqa: E402


def load(model_arg: str | None):
    from components.policy.model import TinyPolicyConfig, build_policy, load_policy
    from components.policy.tokenizer import build_tokenizer

    if model_arg is None:
        tok = build_tokenizer()
        return None, build_policy(TinyPolicyConfig(), tok).eval(), tok
    from components.hf_models import model_dir_of

    d = model_dir_of(Path(model_arg))
    model, tok = load_policy(d)
    return d, model, tok


def contexts(tok, args) -> list[list[int]]:
    if args.math500:
        from components.data.benchmarks import load_benchmark
        from components.data.prompting import encode_prompt

        return [list(encode_prompt(p, tok, "chat")) for p in load_benchmark("math500")[: args.prompts]]
    from components.data.synthetic import generate_problems

    return [tok.encode(p.prompt, add_special_tokens=False)
            for p in generate_problems(args.prompts, [6, 7, 8], seed=3, operand_digits=1)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--engines", default="model.generate,engine")
    ap.add_argument("--math500", action="store_true", help="MATH500 prompts in the chat template")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model_dir, model, tok = load(args.model)
    ctxs = contexts(tok, args)
    from components.hf_models import stop_token_ids

    stops = stop_token_ids(model, tok)

    def baseline(seed: int) -> int:
        rows = [c for c in ctxs for _ in range(args.n)]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), tok.pad_token_id)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):            # left padding, as generate() expects
            ids[i, width - len(r):] = torch.tensor(r)
            att[i, width - len(r):] = 1
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=att, do_sample=True, temperature=1.0, top_p=1.0,
                                 max_new_tokens=args.max_new, pad_token_id=tok.pad_token_id, eos_token_id=stops)
        gen = out[:, width:]
        # tokens up to and including the first stop id are the generated ones
        is_eos = torch.isin(gen, torch.tensor(stops)).int()
        after = (is_eos.cumsum(-1) - is_eos) > 0
        return int((~after).sum())

    def metered(engine):
        def run(seed: int) -> int:
            before = engine.meter.totals()["generated_tokens"]
            engine.generate([Request(tuple(c), n=args.n) for c in ctxs],
                            SamplingParams(1.0, 1.0, args.max_new, seed=seed))
            return engine.meter.totals()["generated_tokens"] - before
        return run

    runners = {}
    for name in args.engines.split(","):
        if name == "model.generate":
            runners[name] = baseline
        elif name == "engine":
            from components.engine.hf import HFEngine
            runners[name] = metered(HFEngine(model, tok, meter=TokenMeter()))
        elif name == "vllm":
            from components.engine.vllm import VLLMEngine
            if model_dir is None:
                raise SystemExit("--engines vllm needs --model (vLLM loads a model directory)")
            t0 = time.perf_counter()
            eng = VLLMEngine(str(model_dir), meter=TokenMeter(), dtype="float32", stop_token_ids=stops)
            print(f"vllm start-up {time.perf_counter() - t0:.1f} s (not in the rates)")
            runners[name] = metered(eng)
        else:
            raise SystemExit(f"unknown engine {name!r} (model.generate | engine | vllm)")
        runners[name](1_000)                   # warm-up call, not timed
    rates: dict[str, list[float]] = {name: [] for name in runners}
    for rep in range(args.repeats):
        for name, fn in runners.items():
            t0 = time.perf_counter()
            toks = fn(rep)
            rates[name].append(toks / (time.perf_counter() - t0))
    for name, r in rates.items():
        print(f"{name:15s} {statistics.median(r):10.0f} generated tokens/s (runs: {', '.join(f'{x:.0f}' for x in r)})")
    first, *rest = list(rates)
    for name in rest:
        ratio = statistics.median(rates[name]) / statistics.median(rates[first])
        print(f"{name} / {first}: {ratio:.2f}x")
    print(f"({len(ctxs)} prompts x {args.n} samples, max {args.max_new} new tokens, {args.threads} threads, "
          f"{'MATH500 chat prompts' if args.math500 else 'synthetic prompts'})")


if __name__ == "__main__":
    main()
