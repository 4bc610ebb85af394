"""Seeded Sokoban level generation by reverse play, and an optimal BFS solver.

Generation follows gym-sokoban's ``room_utils.generate_room`` (Schrader 2018; what verl-agent's
Sokoban calls): (1) carve a room by a random walk that stamps small floor masks, changing
direction with probability 0.35, for ``int(1.7 * (h + w))`` steps, the border staying wall;
(2) put the player and the targets on random floor cells with every box on its target (the
solved board); (3) play backwards from the solved board, where a move may pull the box behind
the player, and keep the most scrambled board reached. Every level is therefore solvable.

Our choices, marked because they differ from gym-sokoban:

* Reverse play is an exhaustive breadth-first search of the pull-state space up to
  ``search_depth`` reverse moves (gym-sokoban: a depth-first search with a shared visited set,
  so its pick depends on visit order). Board score = sum of Manhattan distances of boxes from
  their own target, and 0 when any box stands on any target (as in gym-sokoban); gym-sokoban
  also multiplies by the number of pulls along its search path, which a BFS state does not
  have. Ties are broken by the seeded RNG; a score of 0 redraws the room (gym-sokoban retries).
* Our own random generator (``random.Random`` seeded with a string naming the size, box count
  and seed), so a level is a pure function of (height, width, boxes, seed) in any process.
* Optional ``max_solution_steps``: redraw rooms whose optimal solution is longer (None keeps
  gym-sokoban's behaviour, where some levels cannot be solved within ``max_steps``).

:func:`solve` is a breadth-first search over (player, boxes) states with gym-sokoban's move rule,
so its plan has the fewest moves (player steps, the unit ``max_steps`` counts).
"""
from __future__ import annotations

import random
from collections import deque

from components.envs.sokoban_levels import MOVES, Level

__all__ = ["generate_level", "solve", "SolverBudgetError"]

DIRS = tuple(MOVES.values())
# stamps around the walker, gym-sokoban's five 3x3 masks: two lines, two L shapes, a 2x2 block
MASKS = (
    ((0, -1), (0, 0), (0, 1)),
    ((-1, 0), (0, 0), (1, 0)),
    ((0, -1), (0, 0), (1, 0)),
    ((0, -1), (0, 0), (1, -1), (1, 0)),
    ((0, 0), (0, 1), (1, 0)),
)


class SolverBudgetError(RuntimeError):
    """The solver visited ``max_states`` states without settling the level either way."""


def _carve(rng: random.Random, h: int, w: int) -> set:
    floor = set()
    pos = (rng.randint(1, h - 2), rng.randint(1, w - 2))
    d = rng.choice(DIRS)
    for _ in range(int(1.7 * (h + w))):
        if rng.random() < 0.35:
            d = rng.choice(DIRS)
        pos = (min(max(pos[0] + d[0], 1), h - 2), min(max(pos[1] + d[1], 1), w - 2))
        for a, b in rng.choice(MASKS):
            r, c = pos[0] + a, pos[1] + b
            if 1 <= r <= h - 2 and 1 <= c <= w - 2:
                floor.add((r, c))
    return floor


def _reverse_search(floor: set, targets: tuple, player: tuple, depth: int, rng: random.Random):
    """BFS over pull states from the solved board; the best-scoring (player, boxes) or None."""
    start = (player, targets)
    tset = set(targets)
    seen = {start}
    frontier = [start]
    best, best_states = 0, []
    for _ in range(depth):
        nxt = []
        for p, boxes in frontier:
            for dr, dc in DIRS:
                q = (p[0] + dr, p[1] + dc)
                if q not in floor or q in boxes:
                    continue
                behind = (p[0] - dr, p[1] - dc)
                options = [boxes]
                if behind in boxes:
                    options.append(tuple(p if b == behind else b for b in boxes))
                for nb in options:
                    s = (q, nb)
                    if s not in seen:
                        seen.add(s)
                        nxt.append(s)
        for q, nb in nxt:
            dist = [abs(b[0] - t[0]) + abs(b[1] - t[1]) for b, t in zip(nb, targets)]
            # gym-sokoban scores 0 unless every target is empty (no box starts on any target)
            score = 0 if tset.intersection(nb) else sum(dist)
            if score > best:
                best, best_states = score, [(q, nb)]
            elif score == best and score > 0:
                best_states.append((q, nb))
        if not nxt:
            break
        frontier = nxt
    if best == 0:
        return None
    return rng.choice(sorted(best_states))


def generate_level(seed: int, height: int = 6, width: int = 6, num_boxes: int = 1,
                   search_depth: int = 300, max_solution_steps: int | None = None,
                   max_tries: int = 200) -> tuple[Level, list[str]]:
    """The level for ``seed`` and one optimal solution (list of moves)."""
    if height < 3 or width < 3:
        raise ValueError(f"sokoban: board must be at least 3x3, got {height}x{width}")
    if num_boxes < 1:
        raise ValueError(f"sokoban: num_boxes must be >= 1, got {num_boxes}")
    rng = random.Random(f"sokoban:{height}x{width}:{num_boxes}:{seed}")
    walls_all = {(r, c) for r in range(height) for c in range(width)}
    for _ in range(max_tries):
        floor = _carve(rng, height, width)
        if len(floor) < num_boxes + 2:
            continue
        cells = rng.sample(sorted(floor), num_boxes + 1)
        player, targets = cells[0], tuple(cells[1:])
        picked = _reverse_search(floor, targets, player, search_depth, rng)
        if picked is None:
            continue
        start, boxes = picked
        level = Level(height, width, frozenset(walls_all - floor), targets, boxes, start)
        plan = solve(level)
        if plan is None:
            raise AssertionError(f"sokoban: reverse-played level for seed {seed} is unsolvable:\n"
                                 f"{level.render()}")
        if max_solution_steps is not None and len(plan) > max_solution_steps:
            continue
        return level, plan
    raise RuntimeError(f"sokoban: no {height}x{width} level with {num_boxes} box(es)"
                       + (f" and a solution of <= {max_solution_steps} moves" if max_solution_steps
                          else "") + f" after {max_tries} rooms (seed {seed})")


def solve(level: Level, max_states: int = 2_000_000) -> list[str] | None:
    """A shortest move sequence solving ``level``; None if no sequence solves it.

    Raises ``SolverBudgetError`` past ``max_states`` visited states rather than guessing.
    """
    targets = frozenset(level.targets)
    start = (level.player, tuple(sorted(level.boxes)))
    if frozenset(start[1]) == targets:
        return []
    parent = {start: None}
    queue = deque([start])
    names = list(MOVES.items())
    while queue:
        state = queue.popleft()
        p, boxes = state
        for name, (dr, dc) in names:
            q = (p[0] + dr, p[1] + dc)
            if level.is_wall(q):
                continue
            nb = boxes
            if q in boxes:
                beyond = (q[0] + dr, q[1] + dc)
                if level.is_wall(beyond) or beyond in boxes:
                    continue
                nb = tuple(sorted(beyond if b == q else b for b in boxes))
            s = (q, nb)
            if s in parent:
                continue
            parent[s] = (state, name)
            if frozenset(nb) == targets:
                plan = []
                while parent[s] is not None:
                    s, move = parent[s]
                    plan.append(move)
                return plan[::-1]
            if len(parent) > max_states:
                raise SolverBudgetError(f"sokoban solver: over {max_states} states without a "
                                        f"verdict on\n{level.render()}")
            queue.append(s)
    return None
