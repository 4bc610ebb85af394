"""VSR's replay buffer at scale: insert (observe a step's successful groups), evict (the
recency window + capacity) and sample (score every prefix state, draw rho x batch in
proportion to the score), at 10K, 100K and 1M prefix states, with VSR's defaults (token-level
states: every position of a stored trajectory is a state).

Per-step cost is what matters: each training step calls observe once, evict once and
select_replays once. The ratio reported is the 1M-prefix step cost over the 10K one
(the baseline, same run); absolute times are next to a paper-scale step's generation
(128 prompts x 8 x ~2K tokens on an H200: tens of seconds).

    .venv/bin/python bench/vsr_buffer.py [--sizes 10000 100000 1000000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from components.methods.base import Group
from components.methods.vsr import VSR, VSRConfig, Trajectory

TRACE_LEN = 100          # tokens per stored trajectory
STATES = TRACE_LEN - 1   # its prefix states (cut_points: every)
BATCH, N = 128, 8        # a paper-scale step: 128 prompts x 8 rollouts


def filled(prefixes: int, rng: np.random.Generator) -> VSR:
    trajs = prefixes // STATES
    vsr = VSR(VSRConfig(n=N, rho=0.5, capacity=trajs, window_steps=None))
    resp = list(range(3, 3 + TRACE_LEN))
    for i in range(trajs):   # as if filled by earlier steps of 128 inserts each (oldest first)
        vsr.buffer[f"q{i}"] = Trajectory(f"q{i}", resp, -(trajs - i) // BATCH, "policy")
        vsr.p0[f"q{i}"] = float(rng.random() * 0.3)
    vsr.step = 1
    return vsr


def step_groups(step: int, start: int) -> list[Group]:
    """One step's fresh groups, each with one success (all get inserted: worst case)."""
    resp = tuple(range(3, 3 + TRACE_LEN))
    return [Group(uid=f"g{step}-{i}", problem_uid=f"new{start + i}", answer="1", context_ids=(1, 2), prompt_len=2,
                  responses=[resp] * N, texts=[""] * N, rewards=[1.0] + [0.0] * (N - 1)) for i in range(BATCH)]


def one_step(vsr: VSR, step: int, rng: np.random.Generator) -> dict[str, float]:
    t0 = time.perf_counter()
    vsr.step = step
    vsr.observe(step_groups(step, step * BATCH))     # inserts 128 trajectories, evicts 128 (capacity)
    t1 = time.perf_counter()
    vsr._evict()
    t2 = time.perf_counter()
    picked = vsr.select_replays(int(round(0.5 * BATCH)), rng)
    t3 = time.perf_counter()
    assert len(picked) == BATCH // 2
    return {"insert+evict": t1 - t0, "evict": t2 - t1, "sample": t3 - t2, "step": t3 - t0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    med = {}
    print(f"{'prefixes':>10} {'insert+evict ms':>16} {'evict ms':>9} {'sample ms':>10} {'step ms':>9}")
    for size in args.sizes:
        vsr = filled(size, rng)
        rows = [one_step(vsr, s, rng) for s in range(2, 2 + args.repeats)]
        m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        med[size] = m
        assert len(vsr.buffer) == size // STATES
        print(f"{size:>10} {1e3 * m['insert+evict']:>16.1f} {1e3 * m['evict']:>9.1f} {1e3 * m['sample']:>10.1f}"
              f" {1e3 * m['step']:>9.1f}")
    lo, hi = min(med), max(med)
    print(f"\nVSR buffer step at {hi:,} prefixes: {1e3 * med[hi]['step']:.0f} ms = "
          f"{med[hi]['step'] / med[lo]['step']:.0f}x the {lo:,}-prefix step ({hi // lo}x the states)")


if __name__ == "__main__":
    main()
