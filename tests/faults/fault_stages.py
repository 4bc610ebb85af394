"""Stages for the fault-injection tests (loaded by lineage as ``faults.fault_stages:<name>``).

- ``train_inputs``: everything the REAL ``train`` stage reads, in one artifact: a tiny
  Qwen2 policy pretrained for a few steps on one-digit sums (so rollouts already earn
  some reward and groups are mixed: a resume has real gradients to get wrong), ``train.jsonl``,
  ``heldout.jsonl`` and ``traces.json``. The same URI serves as ``model``, ``hard`` and
  ``prefixes``.
- ``train``: the toy train stage of ``toy_stages`` with one injected failure: when the
  file named by ``FAULT_FAIL_MARKER`` exists and holds ``<method> <seed>``, that one
  mapped task fails (the Airflow clear-and-rerun test).
- ``writer``: writes its artifact through a writer that can run out of space
  (``FAULT_ENOSPC_AFTER`` bytes, then ``OSError(ENOSPC)``), as a full disk would.
"""
from __future__ import annotations

import errno
import json
import os

from pydantic import Field

import toy_stages
from components.stages.base import StageContext, StageParams


class train_inputs:
    NAME, VERSION, INPUTS = "train_inputs", 1, ()

    class Params(StageParams):
        n_train: int = 12
        n_heldout: int = 4
        pretrain_steps: int = 60
        seed: int = 0

    @staticmethod
    def run(params, ctx: StageContext) -> dict:
        import torch

        from components.data.schema import Problem, write_problems
        from components.policy.model import TinyPolicyConfig, build_policy, save_policy
        from components.policy.pretraining import pretrain_policy
        from components.policy.tokenizer import build_tokenizer

        torch.set_num_threads(1)
        # one-digit sums with a two-token answer: learnt in a few dozen steps, and still
        # wrong often enough at T=1 that groups are mixed
        sums = [Problem(uid=f"add/{a}-{b}", prompt=f"Compute {a}+{b}.", answer=str(a + b), source="fault",
                        traces=(f"\\boxed{{{a + b}}}",)) for a in range(10) for b in range(10)]
        tok = build_tokenizer()
        model = build_policy(TinyPolicyConfig(layers=1, hidden=64, heads=2, kv_heads=2, ffn=128,
                                              max_positions=64), tok, seed=params.seed)
        info = pretrain_policy(model, tok, sums, steps=params.pretrain_steps, batch_size=32, lr=1e-2,
                               warmup=5, seed=params.seed, progress=False)
        save_policy(model, tok, ctx.out_dir / "model")
        pool = [sums[i] for i in torch.randperm(len(sums), generator=torch.Generator().manual_seed(params.seed))]
        write_problems(ctx.out_dir / "train.jsonl", pool[:params.n_train])
        write_problems(ctx.out_dir / "heldout.jsonl", pool[params.n_train:params.n_train + params.n_heldout])
        (ctx.out_dir / "traces.json").write_text(json.dumps({p.uid: p.traces[0] for p in pool[:params.n_train]}))
        return {"final_loss": info["final_loss"]}


class train(toy_stages.train):
    @staticmethod
    def run(params, ctx):
        marker = os.environ.get("FAULT_FAIL_MARKER")
        if marker and os.path.exists(marker) and open(marker).read().split() == [params.method, str(params.seed)]:
            raise RuntimeError(f"injected failure of train {params.method} s{params.seed}")
        return toy_stages.train.run(params, ctx)


class _FullDisk:
    """A file whose device fills up after ``room`` bytes."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            self.f.write(data[:self.room])
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.f.name)
        self.room -= len(data)
        return self.f.write(data)


class writer:
    NAME, VERSION, INPUTS = "writer", 1, ()

    class Params(StageParams):
        chunks: int = Field(8, ge=1)
        chunk_bytes: int = 4096

    @staticmethod
    def run(params, ctx: StageContext) -> dict:
        room = int(os.environ.get("FAULT_ENOSPC_AFTER", "-1"))
        (ctx.out_dir / "small.json").write_text("{}")
        with open(ctx.out_dir / "big.bin", "wb") as raw:
            f = _FullDisk(raw, room) if room >= 0 else raw
            for i in range(params.chunks):
                f.write(bytes([i % 256]) * params.chunk_bytes)
        return {"bytes": params.chunks * params.chunk_bytes}


class ticker:
    """One metric row per step (``ticker/value`` = step / 2), a tag and a param logged half-way,
    each step's number written to ``FAULT_PROGRESS``; at step ``hold_at`` and after the last
    step it waits for the files ``FAULT_GATE.1`` / ``FAULT_GATE.2`` (the tracking-outage test
    takes the server down and up between those points)."""
    NAME, VERSION, INPUTS = "ticker", 1, ()

    class Params(StageParams):
        steps: int = Field(12, ge=2)
        hold_at: int = 6
        interval_s: float = 0.2

    @staticmethod
    def run(params, ctx: StageContext) -> dict:
        import time
        gate, progress = os.environ.get("FAULT_GATE"), os.environ.get("FAULT_PROGRESS")

        def hold(n: int) -> None:
            while gate and not os.path.exists(f"{gate}.{n}"):
                time.sleep(0.1)

        for step in range(1, params.steps + 1):
            ctx.tracker.log_metrics({"ticker/value": step / 2}, step=step)
            if step == params.steps // 2:
                ctx.tracker.set_tags({"ticker.half": str(step)})
                ctx.tracker.log_params({"ticker": {"half": step}})
            if progress:
                with open(progress, "w") as f:
                    f.write(str(step))
            if step == params.hold_at:
                hold(1)
            time.sleep(params.interval_s)
        hold(2)
        (ctx.out_dir / "ticks.json").write_text(json.dumps({"steps": params.steps}))
        return {"steps": params.steps}
