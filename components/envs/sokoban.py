"""Sokoban as a text environment, with verl-agent's conventions.

Rewards are gym-sokoban's (``SokobanEnv``: ``penalty_for_step`` -0.1, ``reward_box_on_target``
+1, ``penalty_box_off_target`` -1, ``reward_finished`` +10), used unchanged by verl-agent:
every parsed move costs 0.1 (also a move into a wall that leaves the board unchanged), a push
that puts a box on a target adds 1, one that takes a box off a target subtracts 1, and the move
that places the last box adds 10 and ends the episode. Actions are verl-agent's four words
``up down left right``; ``max_steps`` = 15 (verl-agent ``env.max_steps`` for Sokoban).

Parsing (verl-agent ``sokoban_projection``): the text inside ``<action>...</action>``
(case-insensitive) must name an action. Our choices: a reply without tags that is just one
action word is accepted too (a tiny policy writes bare actions); a reply naming two different
actions is unparsable (verl-agent takes the first in its fixed word order); no ``<think>`` block
is required (verl-agent marks a reply without one invalid for the penalty). An unparsable reply
leaves the board unchanged and costs ``invalid_penalty`` = 0.1 (see ``TextEnv``).

Levels come from the seeded generator (``components.envs.sokoban_gen``) or, with ``levels``
(a list, or a level file path), level ``seed % len(levels)``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from components.envs.base import TextEnv
from components.envs.registry import register
from components.envs.sokoban_gen import generate_level, solve
from components.envs.sokoban_levels import MOVES, Level, load_levels, push

__all__ = ["SokobanEnv", "parse_action", "STEP_PENALTY", "BOX_ON_REWARD", "BOX_OFF_PENALTY",
           "SOLVED_REWARD"]

STEP_PENALTY, BOX_ON_REWARD, BOX_OFF_PENALTY, SOLVED_REWARD = -0.1, 1.0, -1.0, 10.0
_TAG = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)
_WORD = re.compile(r"\b(up|down|left|right)\b")

INSTRUCTION = """You are playing Sokoban. Push every box onto a target.
Symbols: # wall, _ floor, O target, X box, P you, \u221a box on a target, S you on a target.
You can push a box (never pull it) if the cell behind it is free. Each move costs 0.1, a box
onto a target gives +1, a box off a target -1, all boxes on targets +10."""


def parse_action(text: str) -> str | None:
    """The action named by a reply, or None when it names none or several."""
    m = _TAG.search(text)
    body = m.group(1) if m else text
    if not m and len(body.split()) != 1:
        return None
    words = set(_WORD.findall(body.lower()))
    return words.pop() if len(words) == 1 else None


@register("sokoban")
@dataclass
class SokobanEnv(TextEnv):
    height: int = 6
    width: int = 6
    num_boxes: int = 1
    search_depth: int = 300
    max_solution_steps: int | None = None
    levels: list | str | Path | None = None
    name: str = field(default="sokoban", init=False)
    instruction: str = field(default=INSTRUCTION, init=False)
    short_instruction: str = field(default="sokoban", init=False)

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.levels, (str, Path)):
            self.levels = load_levels(self.levels)
        if self.levels is not None and not self.levels:
            raise ValueError("sokoban: levels is empty")
        self.level: Level | None = None
        self._plan: list[str] | None = None

    def _new_game(self, seed: int) -> None:
        if self.levels is not None:
            self.level, self._plan = self.levels[seed % len(self.levels)], None
        else:
            self.level, self._plan = generate_level(
                seed, self.height, self.width, self.num_boxes, self.search_depth,
                self.max_solution_steps)
        self.start_level = self.level

    def optimal_plan(self) -> list[str]:
        """A shortest solution from the episode's start board (BFS)."""
        if self._plan is None:
            plan = solve(self.start_level)
            if plan is None:
                raise ValueError(f"sokoban: level for seed {self.seed} has no solution:\n"
                                 f"{self.start_level.render()}")
            self._plan = plan
        return list(self._plan)

    def solver_action(self) -> str | None:
        """The first move of a shortest solution from the current board; None on a dead board
        (the expert a noisy-solver behaviour-cloning policy imitates)."""
        plan = solve(self.level)
        return plan[0] if plan else None

    def _parse(self, action_text: str) -> str | None:
        return parse_action(action_text)

    def _apply(self, move: str) -> tuple[float, bool, bool]:
        before = self.level.boxes_on_target
        self.level, _moved = push(self.level, move)
        after = self.level.boxes_on_target
        reward = STEP_PENALTY
        if after > before:
            reward += BOX_ON_REWARD
        elif after < before:
            reward += BOX_OFF_PENALTY
        won = self.level.solved
        if won:
            reward += SOLVED_REWARD
        return reward, won, won

    def _state_text(self) -> str:
        return self.level.render()

    def _compact_state(self) -> str:
        # the board without its outer wall ring when it has one (generated boards always do):
        # the compact template's only purpose is fewer tokens per prompt
        rows = [r.replace(" ", "") for r in self.level.render().split("\n")]
        ring = (set(rows[0]) == set(rows[-1]) == {"#"} and all(r[0] == r[-1] == "#" for r in rows))
        if ring and len(rows) > 2 and len(rows[0]) > 2:
            rows = [r[1:-1] for r in rows[1:-1]]
        return "\n".join(rows)

    def admissible_actions(self) -> list[str]:
        return list(MOVES)
