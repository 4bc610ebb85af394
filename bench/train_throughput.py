"""Training throughput: the embedded trainer's update against a plain transformers loop, same batch.

One batch of rollouts (``--prompts`` prompts x ``--n`` samples, sampled by the embedded engine
from ``--model`` at T=1, up to ``--max-new`` tokens; rewards 1 for every other sample, so every
group is mixed and no row is skipped for a zero advantage) is trained on by

  embedded  ``EmbeddedTrainer.update`` (components/trainer/embedded.py): GRPO advantages, the
            clipped policy-gradient loss with entropy, micro-batches trimmed to their longest
            row, grad clipping, AdamW -- what the train stage runs per step;
  plain     a plain transformers loop on the same sequences: per micro-batch (same size)
            ``model(input_ids, attention_mask).logits``, cross-entropy on the response tokens,
            ``backward``, grad clipping, AdamW -- the least a trainer must do.

Each starts from its own copy of the same weights, interleaved, median of ``--repeats``.
Printed: tokens/s (every token of the batch's sequences, prompt and response, per second of
update), the ratio embedded / plain, and with ``--profile`` torch.profiler's top operators of
one embedded update. ``--results KEY`` writes the printout into bench/RESULTS.md.

    .venv/bin/python bench/train_throughput.py --model .rlvr/artifacts/pretrain/<key> --threads 1
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from engine_throughput import contexts, load, print_profile, report, workload_args

from components.engine.base import Request, SamplingParams
from components.methods.base import Group


def rollouts(model, tok, args) -> list[Group]:
    from components.engine.hf import HFEngine

    ctxs = contexts(tok, args)
    outs = HFEngine(model, tok).generate([Request(tuple(c), n=args.n) for c in ctxs],
                                         SamplingParams(1.0, 1.0, args.max_new, seed=0))
    return [Group(uid=f"p{i}", problem_uid=f"p{i}", answer="", context_ids=tuple(c), prompt_len=len(c),
                  responses=[x.token_ids for x in cs], texts=[x.text for x in cs],
                  rewards=[float(j % 2 == 0) for j in range(len(cs))])
            for i, (c, cs) in enumerate(zip(ctxs, outs))]


def embedded(model, tok, groups, args):
    from components.stages.base import NullTracker
    from components.trainer.embedded import EmbeddedTrainer
    from components.trainer.train_config import TrainConfig

    cfg = TrainConfig(batch_prompts=len(groups), max_new_tokens=args.max_new, micro_batch=args.micro_batch)
    trainer = EmbeddedTrainer(cfg, copy.deepcopy(model), tok, lambda texts, golds: [(0.0, "rule")] * len(texts),
                              NullTracker())
    return lambda: trainer.update(groups)


def plain(model, tok, groups, args):
    from components.trainer.sequences import build_sequences

    seqs = build_sequences(groups, tok.pad_token_id)
    m = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(m.parameters(), lr=2e-5, weight_decay=0.0)
    dev = next(m.parameters()).device

    def step():
        opt.zero_grad(set_to_none=True)
        n_tokens = seqs.response_mask[:, 1:].sum()
        for lo in range(0, len(seqs), args.micro_batch):
            ids = seqs.input_ids[lo:lo + args.micro_batch].to(dev)
            att = seqs.attention[lo:lo + args.micro_batch].to(dev)
            mask = seqs.response_mask[lo:lo + args.micro_batch, 1:].to(dev)
            logits = m(input_ids=ids, attention_mask=att).logits[:, :-1].float()
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
            ((nll * mask).sum() / n_tokens).backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
    return step


def run(args) -> None:
    from components.engine.device import place

    torch.set_num_threads(args.threads)
    _, model, tok = load(args.model)
    model = place(model, args.device, args.dtype)
    groups = rollouts(model, tok, args)
    tokens = sum(len(g.context_ids) * g.n + sum(map(len, g.responses)) for g in groups)
    runners = {"plain": plain(model, tok, groups, args), "embedded": embedded(model, tok, groups, args)}
    for fn in runners.values():
        fn()                                      # warm-up: optimizer state, allocator
    if args.profile:
        from torch.profiler import profile

        with profile() as prof:
            runners["embedded"]()
        print_profile(prof, "\nprofile of one embedded update:", args.profile_top)
    rates: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.repeats):
        for name, fn in runners.items():
            t0 = time.perf_counter()
            fn()
            rates[name].append(tokens / (time.perf_counter() - t0))
    dev, dtype = next(model.parameters()).device, str(next(model.parameters()).dtype).replace("torch.", "")
    print("\n| update | tokens/s (runs) |\n|---|---|")
    for name, r in rates.items():
        print(f"| {name} | {statistics.median(r):,.0f} ({', '.join(f'{x:,.0f}' for x in r)}) |")
    print(f"| embedded / plain | {statistics.median(rates['embedded']) / statistics.median(rates['plain']):.2f}x |")
    print(f"\n({len(groups)} prompts x {args.n} samples, {tokens:,} tokens per update "
          f"({sum(len(r) for g in groups for r in g.responses):,} response tokens), micro-batch {args.micro_batch}, "
          f"torch threads {torch.get_num_threads()}, {dev} in {dtype}, median of {args.repeats}, interleaved)")


def main() -> None:
    ap = argparse.ArgumentParser()
    workload_args(ap, prompts=16, max_new=128, threads=1)
    ap.add_argument("--micro-batch", type=int, default=64)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-top", type=int, default=12)
    ap.add_argument("--results", default=None, metavar="KEY")
    args = ap.parse_args()
    report(args.results, lambda: run(args))


if __name__ == "__main__":
    main()
