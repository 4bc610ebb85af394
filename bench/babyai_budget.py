"""Turn and position budgets of an embedded BabyAI regime (agentic_babyai.yaml's choices).

Per level, over map seeds 0..maps-1: minigrid BabyAIBot's plan lengths (median, range, the
share that fits ``--max-steps`` turns: a seed whose plan is longer cannot be solved in the budget
by the bot, and a cloned policy is no shorter), the level's own step limits, and the length in
the tiny policy's character tokens of the compact prompt along the bot's own trajectory, for each
``--history`` setting (longest, and the share of states over ``--positions`` minus the reply).

    .venv/bin/python bench/babyai_budget.py [--levels BabyAI-SynthLoc-v0] [--maps 30]
        [--max-steps 20] [--history 1 2] [--positions 192] [--reply 12]
"""
from __future__ import annotations

import argparse
import statistics

from components.agentic.policy import build_agent_tokenizer
from components.envs import make_env
from components.envs.babyai import PAPER_LEVELS, expert_actions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", nargs="+", default=list(PAPER_LEVELS))
    ap.add_argument("--maps", type=int, default=30)
    ap.add_argument("--max-steps", type=int, default=20)
    ap.add_argument("--history", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--positions", type=int, default=192)
    ap.add_argument("--reply", type=int, default=12)
    args = ap.parse_args()
    tok = build_agent_tokenizer(max_positions=4096)
    room = args.positions - args.reply
    for level in args.levels:
        plans = {seed: expert_actions(level, seed) for seed in range(args.maps)}
        lengths = sorted(len(p) for p in plans.values())
        fits = sum(n <= args.max_steps for n in lengths)
        limits = set()
        print(f"{level}: BabyAIBot plan length over seeds 0..{args.maps - 1}: median {statistics.median(lengths)}, "
              f"range {lengths[0]}-{lengths[-1]}; {fits}/{args.maps} plans fit {args.max_steps} turns")
        for h in args.history:
            sizes = []
            for seed, plan in plans.items():
                env = make_env("babyai", level=level, template="compact", history_turns=h)
                env.reset(seed)
                limits.add(env.max_steps)
                for a in plan:
                    sizes.append(len(tok.encode(env.prompt())))
                    env.step(a)
            over = sum(n > room for n in sizes)
            print(f"  history_turns {h}: compact prompt tokens longest {max(sizes)}, median "
                  f"{statistics.median(sizes)}; {over}/{len(sizes)} states ({100 * over / len(sizes):.1f} %) "
                  f"over {room} (= {args.positions} positions - {args.reply} reply tokens)")
        print(f"  the level's own step limits: {sorted(limits)}")


if __name__ == "__main__":
    main()
