"""Generated tokens/s of the rollout engines on the same requests, in the same run.

Engines (``--engines``, comma-separated, in order):
  model.generate  plain ``model.generate(do_sample=True)`` on the padded batch (each prompt
                  repeated n times): the baseline the embedded engine is measured against
  engine          the embedded transformers engine (components/engine/hf.py): one prefill per
                  prompt, its KV cache shared by the n samples, finished rows dropped, requests
                  bucketed by context length, grouped-query attention without KV copies,
                  linear layers on oneDNN with packed weights, decode steps as direct tensor
                  operations (components/engine/decode.py)
  engine-before   the same engine with one padded batch and the model's own (sdpa) attention,
                  linear layers (MKL's sgemm on the CPU) and forward:
                  what bucketing, the engine's attention and its linears are measured against
  vllm            vLLM's engine (components/engine/vllm.py; the CPU build in .venv-scale)

Requests: ``--prompts`` prompts x ``--n`` samples, temperature 1, up to ``--max-new`` tokens.
The tiny policy's prompts are synthetic chains (``--model`` a tiny-policy dir or stage
artifact; none = freshly initialised); ``--math500`` takes MATH500's first problems in the
chat template instead (a real model: ``--model`` a pretrain artifact with model_ref.json or an
HF directory). Prints the median of ``--repeats`` runs per engine and the ratio of every
engine to each one before it.
Thread count matters for the ratio: ``--threads`` sets torch's threads before any engine
starts; run with ``OMP_NUM_THREADS`` equal to it so that vLLM's CPU kernels (OpenMP) use the
same count (vLLM's CPU worker then disables ``torch.set_num_threads`` in this process). The
count each engine ran with is printed.

``--markdown`` prints the tables as markdown (what bench/RESULTS.md holds). ``--profile``
first prints torch.profiler's top operators of one call of ``engine-before`` and ``engine``
(where the decode loop's time goes, before and after). ``--device auto`` (default) runs the
embedded engine and ``model.generate`` on CUDA when present (bf16 there, ``--dtype``).

    .venv/bin/python bench/engine_throughput.py --model .rlvr/artifacts/pretrain/<key>
    .venv-scale/bin/python bench/engine_throughput.py --engines engine,vllm --model <tiny pretrain artifact>
    .venv-scale/bin/python bench/engine_throughput.py --engines engine,vllm --model <SmolLM2 pretrain artifact> \
        --math500 --prompts 16 --n 4 --max-new 256
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from components.artifacts import write_atomic
from components.engine.base import Request, SamplingParams, TokenMeter

# the engine before bucketing, its attention, its oneDNN linears and its decode step (components/engine/hf.py)
BEFORE = {"attention": "model", "bucket": False, "decode": "model", "linear": "model"}


def profile_engines(model, tok, ctxs, args) -> None:
    """torch.profiler's top operators (self time) of one call per engine variant."""
    from torch.profiler import ProfilerActivity, profile

    from components.engine.hf import HFEngine

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if next(model.parameters()).is_cuda else [])
    reqs = [Request(tuple(c), n=args.n) for c in ctxs]
    max_new = args.profile_max_new or args.max_new
    sp = SamplingParams(args.temperature, args.top_p, max_new, seed=0)
    for name, kw in (("engine-before", BEFORE), ("engine", {})):
        eng = HFEngine(model, tok, **kw)
        t0 = time.perf_counter()
        with profile(activities=acts) as prof:
            eng.generate(reqs, sp)
        wall = time.perf_counter() - t0
        print_profile(prof, f"\nprofile {name}: {wall:.1f} s wall (profiled), {len(eng._chunks(reqs, max_new))} "
                            f"batch(es), {eng.meter.totals()['generated_tokens']} generated tokens (up to {max_new} "
                            "per sequence)", args.profile_top)


def print_profile(prof, title: str, top: int) -> None:
    """``title``, then the ``top`` operators of a torch.profiler run by self CPU time, as a table."""
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in ops) or 1
    print(f"{title}\n| operator | self CPU s | share | calls |\n|---|---|---|---|")
    for e in ops[:top]:
        print(f"| {e.key} | {e.self_cpu_time_total / 1e6:.2f} | {e.self_cpu_time_total / total:.1%} | {e.count} |")
    print()


def load(model_arg: str | None):
    from components.policy.model import TinyPolicyConfig, build_policy, load_policy
    from components.policy.tokenizer import build_tokenizer

    if model_arg is None:
        tok = build_tokenizer()
        return None, build_policy(TinyPolicyConfig(), tok).eval(), tok
    from components.hf_models import model_dir_of

    d = model_dir_of(Path(model_arg))
    return (d, *load_policy(d))


def workload_args(ap: argparse.ArgumentParser, prompts: int, max_new: int, threads: int) -> None:
    """The requests both engine and training benchmarks build (``load``, ``contexts``) and how often."""
    ap.add_argument("--model", default=None, help="a tiny-policy dir, a pretrain artifact or an HF directory")
    ap.add_argument("--math500", action="store_true", help="MATH500 prompts in the chat template")
    ap.add_argument("--prompts", type=int, default=prompts)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new", type=int, default=max_new)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=threads)
    ap.add_argument("--device", default="auto", help="the embedded engine / trainer: auto | cpu | cuda")
    ap.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU) | float32 | bfloat16")


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
    workload_args(ap, prompts=32, max_new=96, threads=2)
    ap.add_argument("--engines", default="model.generate,engine")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--vllm-dtype", default="float32", help="the throughput runs' vLLM dtype (the engine runs fp32)")
    ap.add_argument("--warmup", default="all", help="engines that get an untimed warm-up call first "
                    "(comma-separated, 'all' or 'none')")
    ap.add_argument("--markdown", action="store_true", help="the throughput table as markdown")
    ap.add_argument("--profile", action="store_true", help="print the engine's profile before/after first")
    ap.add_argument("--profile-top", type=int, default=12)
    ap.add_argument("--profile-max-new", type=int, default=None, help="the profiled calls' new tokens (default --max-new)")
    ap.add_argument("--results", default=None, metavar="KEY", help="also write this run's output into bench/RESULTS.md, "
                    "in the block marked KEY (replaced when present, else appended)")
    args = ap.parse_args()
    report(args.results, lambda: run(args))


def report(key: str | None, fn) -> None:
    """Run ``fn``; with a KEY, its printout (between the load average at start and at end)
    also goes into bench/RESULTS.md's block KEY (``write_results``)."""
    if key is None:
        fn()
        return
    buf = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, buf)):
        print(f"load average at start (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}; "
              f"{os.cpu_count()} CPUs")
        fn()
        print(f"\nload average at end (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    write_results(key, buf.getvalue())


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for st in self.streams:
            st.write(text)
        return len(text)

    def flush(self) -> None:
        for st in self.streams:
            st.flush()

    def fileno(self) -> int:
        # libraries that redirect the descriptor itself (vLLM silencing its kernels) get the terminal's
        return self.streams[0].fileno()


RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
# library log records and warnings that reach stdout (vLLM logs there): not part of the results
LOG_LINE = re.compile(r"^(\(EngineCore.*\) )?(INFO|WARNING|DEBUG|ERROR) \d\d-\d\d |.*Warning|\s*warnings\.warn|\s*_warn_once")


def write_results(key: str, output: str, path: Path = RESULTS) -> None:
    """Put ``output`` (this run's printout) into ``path`` between KEY's markers, with the
    command that printed it; replaced in place when the block exists, else appended under a
    heading. Written to a temporary file and renamed (never half-written)."""
    bench = Path(sys.argv[0]).stem
    begin, end = f"<!-- {bench}:{key} -->", f"<!-- /{bench}:{key} -->"
    argv = " ".join(a if a and not set(a) & set(" ,*") else repr(a) for a in sys.argv[1:])
    block = (f"{begin}\n`bench/{bench}.py {argv}` printed (OMP_NUM_THREADS="
             f"{os.environ.get('OMP_NUM_THREADS', 'unset')}):\n\n"
             + "\n".join(line for line in output.splitlines() if not LOG_LINE.match(line)) + f"\n{end}")
    text = path.read_text()
    if begin in text:
        if end not in text:
            raise SystemExit(f"{path}: block {key!r} has no end marker {end!r}")
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n### Run `{key}` (`bench/{bench}.py --results {key}`)\n\n{block}\n"
    write_atomic(path, text)


def run(args) -> None:
    torch.set_num_threads(args.threads)
    from components.engine.device import place

    model_dir, model, tok = load(args.model)
    model = place(model, args.device, args.dtype)
    device, dtype = next(model.parameters()).device, str(next(model.parameters()).dtype).replace("torch.", "")
    ctxs = contexts(tok, args)
    if args.profile:
        profile_engines(model, tok, ctxs, args)
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
            out = model.generate(input_ids=ids.to(device), attention_mask=att.to(device), do_sample=True, temperature=args.temperature,
                                 top_p=args.top_p, max_new_tokens=args.max_new, pad_token_id=tok.pad_token_id,
                                 eos_token_id=stops)
        gen = out[:, width:]
        # tokens up to and including the first stop id are the generated ones
        is_eos = torch.isin(gen, torch.tensor(stops, device=device)).int()
        after = (is_eos.cumsum(-1) - is_eos) > 0
        return int((~after).sum())

    def metered(engine):
        def run(seed: int) -> int:
            before = engine.meter.totals()["generated_tokens"]
            engine.generate([Request(tuple(c), n=args.n) for c in ctxs],
                            SamplingParams(args.temperature, args.top_p, args.max_new, seed=seed))
            return engine.meter.totals()["generated_tokens"] - before
        return run

    runners = {}
    startup = ""
    for name in args.engines.split(","):
        if name == "model.generate":
            runners[name] = baseline
        elif name in ("engine", "engine-before"):
            from components.engine.hf import HFEngine
            kw = BEFORE if name == "engine-before" else {}
            runners[name] = metered(HFEngine(model, tok, meter=TokenMeter(), **kw))
        elif name == "vllm":
            from components.engine.vllm import VLLMEngine
            if model_dir is None:
                raise SystemExit("--engines vllm needs --model (vLLM loads a model directory)")
            t0 = time.perf_counter()
            eng = VLLMEngine(str(model_dir), meter=TokenMeter(), dtype=args.vllm_dtype, stop_token_ids=stops)
            startup = f"{time.perf_counter() - t0:.0f} s"
            print(f"vllm start-up {startup} (not in the rates)")
            runners[name] = metered(eng)
        else:
            raise SystemExit(f"unknown engine {name!r} (model.generate | engine | engine-before | vllm)")
        if args.warmup == "all" or name in args.warmup.split(","):
            runners[name](1_000)               # warm-up call, not timed
    rates: dict[str, list[float]] = {name: [] for name in runners}
    cpu_share: dict[str, list[float]] = {name: [] for name in runners}
    for rep in range(args.repeats):
        for name, fn in runners.items():
            t0, c0 = time.perf_counter(), time.process_time()
            toks = fn(rep)
            wall = time.perf_counter() - t0
            rates[name].append(toks / wall)
            cpu_share[name].append((time.process_time() - c0) / wall)
    threads = torch.get_num_threads()
    shapes = (f"{len(ctxs)} prompts x {args.n} samples, T={args.temperature}, top_p={args.top_p}, max {args.max_new} "
              f"new tokens, torch threads {threads}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
              f"{'MATH500 chat prompts' if args.math500 else 'synthetic prompts'}, median of {args.repeats} runs, "
              f"warm-up call for: {args.warmup}, engines interleaved, embedded engine / model.generate on {device} in {dtype}")
    names = list(rates)
    # every pair once: the embedded engine over the other when it is in the pair, else the later over the earlier
    pairs = [(b, a) if a == "engine" else (a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    if args.markdown:
        label = {"model.generate": f"`model.generate` ({dtype}, {device})",
                 "engine": f"embedded transformers engine ({dtype}, {device})",
                 "engine-before": f"embedded engine, one padded batch, sdpa attention, F.linear, model forward ({dtype}, {device})",
                 "vllm": f"vLLM CPU ({args.vllm_dtype}; start-up {startup}, not in the rates)"}
        print("\n| engine | generated tokens/s (runs) | process CPU s / wall s |\n|---|---|---|")
        for name, r in rates.items():
            print(f"| {label[name]} | {statistics.median(r):,.0f} ({', '.join(f'{x:,.0f}' for x in r)}) | "
                  f"{statistics.median(cpu_share[name]):.2f} |")
        for a, b in pairs:
            print(f"| {b} / {a} | {statistics.median(rates[b]) / statistics.median(rates[a]):.2f}x | |")
        print(f"\n({shapes})")
        return
    for name, r in rates.items():
        print(f"{name:15s} {statistics.median(r):10.0f} generated tokens/s (runs: {', '.join(f'{x:.0f}' for x in r)}); "
              f"CPU s / wall s {statistics.median(cpu_share[name]):.2f}")
    for a, b in pairs:
        print(f"{b} / {a}: {statistics.median(rates[b]) / statistics.median(rates[a]):.2f}x")
    print(f"({shapes})")


if __name__ == "__main__":
    main()
