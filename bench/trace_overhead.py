"""TRACE's per-update decision overhead (``starts`` + ``observe``: anchor scoring, the draw,
the predictor's online logistic steps, anchor bookkeeping) at an agentic sweep's shapes, and,
given the sweep's store, its ratio to the measured wall time of a TRACE training update.

The episodes are synthetic (random action words, lengths 1..horizon, a success share like the
embedded Sokoban policy's), so only TRACE's own work is timed; the anchor pool grows as in a
run (every played turn prefix becomes an anchor for ``window_steps`` updates).

    .venv/bin/python bench/trace_overhead.py [--updates 36] [--batch-seeds 4] [--n 8]
        [--home $RLVR_HOME --sweep agentic_long]    # + the measured step time of its trace runs
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from components.agentic.rollout import EpisodeContext, EpisodeRun, TurnRecord
from components.methods.registry import build

WORDS = ("up", "down", "left", "right")


def play(starts, rng: np.random.Generator, horizon: int, success: float) -> list[EpisodeRun]:
    """Synthetic episodes from each start: random words, random length, won with ``success``."""
    runs = []
    for s in starts:
        for _ in range(s.n):
            won = bool(rng.random() < success)
            length = int(rng.integers(1, max(2, horizon - len(s.prefix)) + 1))
            turns = [TurnRecord((), (), str(rng.choice(WORDS)), -0.1, "", bool(rng.random() < 0.9), "stop")
                     for _ in range(length)]
            if won:
                turns[-1].reward = 10.0
            runs.append(EpisodeRun(s, turns, won=won, done=True))
    return runs


def decision_ms(method: str, config: dict, updates: int, batch_seeds: int, horizon: int, success: float,
                seed: int) -> list[float]:
    m = build(method, config, task="agentic")
    rng = np.random.default_rng(seed)
    m.setup(list(range(64)), {})
    out, t_play = [], [0.0]

    def timed_play(starts, _seed):
        t = time.perf_counter()
        runs = play(starts, rng, horizon, success)
        t_play[0] += time.perf_counter() - t
        return runs

    for step in range(updates):
        batch = rng.choice(64, size=batch_seeds, replace=False).tolist()
        t_play[0] = 0.0
        t0 = time.perf_counter()
        groups = m.rollout(batch, EpisodeContext(timed_play, 0, step), rng)
        m.observe(groups)
        out.append(1e3 * (time.perf_counter() - t0 - t_play[0]))   # the method's decisions only
    return out


def measured_step_s(home: str, sweep: str) -> list[float]:
    """time/step_s of every update of the sweep's finished TRACE train runs (MLflow only)."""
    os.environ["RLVR_HOME"] = home
    from components import lineage

    c = lineage.client()
    exp = c.get_experiment_by_name(sweep)
    if exp is None:
        raise SystemExit(f"--home {home}: no experiment {sweep!r}")
    runs = c.search_runs([exp.experiment_id], "tags.`rlvr.stage` = 'train' and params.`train.method` = 'trace' "
                                              "and attributes.status = 'FINISHED'")
    if not runs:
        raise SystemExit(f"--home {home}: no finished trace train run in {sweep!r}")
    return [h.value for r in runs for h in c.get_metric_history(r.info.run_id, "time/step_s")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=36)
    ap.add_argument("--batch-seeds", type=int, default=4)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--horizon", type=int, default=15)
    ap.add_argument("--success", type=float, default=0.15)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--home", default=None)
    ap.add_argument("--sweep", default="agentic_long")
    a = ap.parse_args()
    per = [decision_ms("trace", {"n": a.n, "horizon": a.horizon}, a.updates, a.batch_seeds, a.horizon, a.success, seed)
           for seed in range(a.repeats)]
    base = [v for seed in range(a.repeats)
            for v in decision_ms("grpo", {"n": a.n}, a.updates, a.batch_seeds, a.horizon, a.success, seed)]
    flat = [v for run in per for v in run]
    last = [run[-1] for run in per]
    print(f"TRACE decision time per update ({a.batch_seeds} groups x {a.n} episodes, horizon {a.horizon}, "
          f"{a.updates} updates, {a.repeats} repeats): mean {statistics.mean(flat):.2f} ms, "
          f"max {max(flat):.2f} ms, last update {statistics.mean(last):.2f} ms; fresh groups (grpo, the baseline, "
          f"same episodes): mean {statistics.mean(base):.2f} ms; trace / grpo = {statistics.mean(flat) / statistics.mean(base):.1f}x")
    if a.home:
        steps = measured_step_s(a.home, a.sweep)
        mean_s = statistics.mean(steps)
        print(f"measured TRACE update wall time ({a.sweep}, {len(steps)} updates): mean {mean_s:.2f} s; "
              f"decision / update = {statistics.mean(flat) / 1e3 / mean_s:.4f}")


if __name__ == "__main__":
    main()
