"""Generated tokens/s of the transformers engine vs plain ``model.generate()`` on the same batch.

Same tiny policy (pretrained if ``--model DIR`` is given, else freshly initialised), same
requests (``--prompts`` prompts x ``--n`` samples each, temperature 1, up to
``--max-new`` tokens). The baseline repeats each prompt n times and calls
``model.generate(do_sample=True)`` on the padded batch; the engine prefills each prompt
once, shares its KV cache across the n samples, and drops finished rows as it goes.
Prints the median of ``--repeats`` runs of each and the ratio last.

    .venv/bin/python bench/engine_throughput.py --model .rlvr/artifacts/pretrain/<key>/model
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from components.data.synthetic import generate_problems  # noqa: E402
from components.engine.base import Request, SamplingParams, TokenMeter  # noqa: E402
from components.engine.hf import HFEngine  # noqa: E402
from components.policy import TinyPolicyConfig, build_policy, build_tokenizer, load_policy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        model, tok = load_policy(args.model)
    else:
        tok = build_tokenizer()
        model = build_policy(TinyPolicyConfig(), tok).eval()
    probs = generate_problems(args.prompts, [6, 7, 8], seed=3, operand_digits=1)
    ctxs = [tok.encode(p.prompt, add_special_tokens=False) for p in probs]

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
                                 max_new_tokens=args.max_new, pad_token_id=tok.pad_token_id,
                                 eos_token_id=tok.eos_token_id)
        gen = out[:, width:]
        # tokens up to and including the first EOS are the generated ones
        is_eos = (gen == tok.eos_token_id).int()
        after = (is_eos.cumsum(-1) - is_eos) > 0
        return int((~after).sum())

    engine = HFEngine(model, tok, meter=TokenMeter())

    def ours(seed: int) -> int:
        before = engine.meter.totals()["generated_tokens"]
        engine.generate([Request(tuple(c), n=args.n) for c in ctxs], SamplingParams(1.0, 1.0, args.max_new, seed=seed))
        return engine.meter.totals()["generated_tokens"] - before

    rates = {"model.generate": [], "engine": []}
    for rep in range(args.repeats):
        for name, fn in (("model.generate", baseline), ("engine", ours)):
            t0 = time.perf_counter()
            toks = fn(rep)
            rates[name].append(toks / (time.perf_counter() - t0))
    for name, r in rates.items():
        print(f"{name:15s} {statistics.median(r):10.0f} generated tokens/s (runs: {', '.join(f'{x:.0f}' for x in r)})")
    ratio = statistics.median(rates["engine"]) / statistics.median(rates["model.generate"])
    print(f"engine / model.generate: {ratio:.2f}x  ({args.prompts} prompts x {args.n} samples, "
          f"max {args.max_new} new tokens, {args.threads} threads)")


if __name__ == "__main__":
    main()
