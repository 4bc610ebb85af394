"""Behaviour cloning of a noisy expert: the embedded base policy for a text environment.

The expert is the environment's ``expert_action`` (Sokoban: the first move of a BFS-optimal
plan from the current board; BabyAI: minigrid's ``BabyAIBot``). With probability ``noise`` the
demonstrator takes a uniformly random admissible action instead, and so does it on a board the
expert gives up on (a dead Sokoban board). The label of a turn is the action the demonstrator
took, noise included, so the cloned policy is itself noisy: it solves boards with short
solutions often and long ones rarely, the regime where RL from its own successes has something
to learn. Examples are (prompt, action) pairs, trained with the math demo's SFT loop
(``components.policy.pretrain_policy``: loss on the action and EOS only).
"""
from __future__ import annotations

import random
from typing import Callable, Sequence

from components.data.schema import Problem

__all__ = ["demonstrations", "expert_action"]


def expert_action(env) -> str | None:
    """The expert's next action in ``env``'s current state; None when it has none."""
    if hasattr(env, "solver_action"):
        return env.solver_action()
    raise TypeError(f"{env.name}: no expert for behaviour cloning (needs solver_action())")


def demonstrations(make_env: Callable, seeds: Sequence[int], noise: float, seed: int = 0
                   ) -> tuple[list[Problem], dict[str, float]]:
    """One noisy-expert episode per map seed, as SFT examples (one per turn), and its stats."""
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"bc: noise must be in [0, 1], got {noise}")
    rng = random.Random(f"bc-{seed}")
    out, wins, turns = [], 0, 0
    for s in seeds:
        env = make_env()
        prompt, done, info = env.reset(s), False, {"won": False}
        t = 0
        while not done:
            a = expert_action(env)
            if a is None or rng.random() < noise:
                a = rng.choice(env.admissible_actions())
            out.append(Problem(uid=f"{s}-{t}", prompt=prompt, answer=a, source=f"bc-{env.name}",
                               traces=(a,)))
            prompt, _, done, info = env.step(a)
            t += 1
        wins += bool(info["won"])
        turns += t
    if not out:
        raise ValueError("bc: no map seeds to demonstrate on")
    return out, {"demo_episodes": len(seeds), "demo_success": wins / len(seeds),
                 "demo_turns": turns, "noise": noise}
