"""Measure the embedded regime: how good is the tiny base policy after a short pretrain?

Pretrains the tiny Qwen2 policy on expert traces of a level mix, then samples at T=1 on
fresh problems per level and prints the pass rate per level, the share of "hard" prompts
(at most 1 success in 32 samples) and the elapsed seconds of each phase. The goal is a
setting where 2-3-term problems are solved often (> .6) and 5-6-term problems rarely
(< .1), within a few CPU minutes.

    .venv/bin/python bench/pretrain_regime.py --steps 500 --mix 2:.35,3:.35,4:.25,5:.05
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from components.data.synthetic import generate_problems  # noqa: E402
from components.engine.base import Request, SamplingParams  # noqa: E402
from components.engine.hf import HFEngine  # noqa: E402
from components.policy.model import TinyPolicyConfig, build_policy, save_policy  # noqa: E402
from components.policy.pretraining import pretrain_policy  # noqa: E402
from components.policy.tokenizer import build_tokenizer  # noqa: E402

BOXED = re.compile(r"\\boxed\{(-?\d+)\}")


def parse_mix(s: str) -> dict[int, float]:
    return {int(k): float(v) for k, v in (part.split(":") for part in s.split(","))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--mix", default="2:.35,3:.35,4:.25,5:.05")
    ap.add_argument("--n-train", type=int, default=20000)
    ap.add_argument("--eval-levels", default="2,3,4,5,6,7")
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument("--eval-samples", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--digits", type=int, default=2, help="operand digits")
    ap.add_argument("--save", default="", help="directory to save the pretrained policy in")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    tok = build_tokenizer()
    train = generate_problems(args.n_train, parse_mix(args.mix), seed=args.seed, operand_digits=args.digits)
    model = build_policy(TinyPolicyConfig(), tok, seed=args.seed)
    log = lambda step, m: print(f"  step {step:4d} loss {m['loss']:.4f} lr {m['lr']:.2e} {m['elapsed_s']:.0f}s", flush=True)  # noqa: E731
    res = pretrain_policy(model, tok, train, steps=args.steps, batch_size=args.batch, lr=args.lr,
                          warmup=args.warmup, seed=args.seed, progress=False, log_fn=log, log_every=50)
    t_pre = time.perf_counter() - t0
    if args.save:
        save_policy(model, tok, args.save)

    engine = HFEngine(model, tok)
    exclude = {p.uid for p in train}
    rows = []
    t1 = time.perf_counter()
    for lv in [int(x) for x in args.eval_levels.split(",")]:
        probs = generate_problems(args.eval_prompts, [lv], seed=10_000 + args.seed + lv, exclude=exclude,
                                  operand_digits=args.digits)
        reqs = [Request(tuple(tok.encode(p.prompt, add_special_tokens=False)), n=args.eval_samples, tag=p.uid)
                for p in probs]
        tl = time.perf_counter()
        outs = engine.generate(reqs, SamplingParams(temperature=1.0, max_new_tokens=16 * lv + 32, seed=lv), "eval")
        succ = [sum(1 for c in cs if (m := BOXED.search(c.text)) and m.group(1) == p.answer)
                for p, cs in zip(probs, outs)]
        gen_tok = sum(len(c.token_ids) for cs in outs for c in cs)
        rows.append({"level": lv, "pass": sum(succ) / (len(probs) * args.eval_samples),
                     "hard_le1": sum(s <= 1 for s in succ) / len(probs), "zero": sum(s == 0 for s in succ) / len(probs),
                     "gen_tokens": gen_tok, "seconds": time.perf_counter() - tl})
        r = rows[-1]
        print(f"level {lv}: pass@1(T=1) {r['pass']:.3f}  share<=1/{args.eval_samples} {r['hard_le1']:.2f}  "
              f"share 0/{args.eval_samples} {r['zero']:.2f}  ({gen_tok} tokens, {r['seconds']:.1f}s, "
              f"{gen_tok / r['seconds']:.0f} tok/s)", flush=True)
    t_eval = time.perf_counter() - t1
    print(json.dumps({"args": vars(args), "pretrain": res, "pretrain_s": round(t_pre, 1),
                      "eval_s": round(t_eval, 1), "levels": rows}, indent=None))
    print(f"pretrain {t_pre:.0f}s ({res['seconds'] / args.steps:.2f}s/step, final loss {res['final_loss_avg']:.4f}); "
          f"eval {t_eval:.0f}s")


if __name__ == "__main__":
    main()
