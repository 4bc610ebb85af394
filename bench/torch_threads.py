"""One pretraining-sized step of the tiny policy (batch 128 x 100 tokens: forward, backward,
AdamW) with 1 and with 2 torch threads, alternated, 4 steps each. On the shared 2-core machine
under load, 2 threads can be much slower than 1 (threads wait for each other at every
parallel region while the other cores run other jobs); the demo sweeps use ``threads: 1``.

    .venv/bin/python bench/torch_threads.py [THREADS ...]    (default: 1 2 1 2)
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(counts: list[int]) -> None:
    import torch

    from components.policy.model import TinyPolicyConfig, build_policy
    from components.policy.tokenizer import build_tokenizer

    tok = build_tokenizer()
    model = build_policy(TinyPolicyConfig(), tok, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(3, 30, (128, 100), generator=torch.Generator().manual_seed(0))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for n in counts:
        torch.set_num_threads(n)
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            model(input_ids=x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad()
            times.append(time.perf_counter() - t0)
        print(f"{n} thread(s): {sorted(times)[len(times) // 2]:.2f} s/step (median of 4; {', '.join(f'{t:.2f}' for t in times)})",
              flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1, 2, 1, 2])
