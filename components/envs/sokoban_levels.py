"""Sokoban boards: the immutable level, its text form, the move rule, and the level-file loader.

Symbols are verl-agent's (``SokobanEnv.GRID_LOOKUP`` in ``agent_system/environments/env_package/
sokoban/sokoban/env.py``, itself gym-sokoban's room codes): ``#`` wall, ``_`` floor, ``O``
target, ``X`` box, ``P`` player, ``√`` box on target, ``S`` player on target.

Rendering (our choice): one row per line, cells separated by one space. verl-agent writes
``" X \\t"`` per cell; the symbols and row order are the same, the padding is ours.

Level files (our format): levels separated by blank lines; ``;`` starts a comment line; a row is
a string of symbols (spaces and tabs inside a row are ignored, so a rendered board is a valid
row block). A level needs one player, at least one box and as many targets as boxes. Anything
else is rejected with ``LevelFileError("<file>:<line>: <what>")``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Level", "LevelFileError", "MOVES", "SYMBOLS", "load_levels", "parse_level", "push"]

WALL, FLOOR, TARGET, BOX, PLAYER, BOX_ON_TARGET, PLAYER_ON_TARGET = "#", "_", "O", "X", "P", "√", "S"
SYMBOLS = (WALL, FLOOR, TARGET, BOX, PLAYER, BOX_ON_TARGET, PLAYER_ON_TARGET)
# action name -> (d_row, d_col); verl-agent's action order 1..4 = up, down, left, right
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

Cell = tuple[int, int]


class LevelFileError(ValueError):
    """A malformed level file; the message is ``<file>:<line>: <what is wrong>``."""


@dataclass(frozen=True)
class Level:
    """A board state. ``boxes`` is sorted, so equal boards compare and hash equal."""
    height: int
    width: int
    walls: frozenset
    targets: tuple
    boxes: tuple
    player: Cell

    def __post_init__(self):
        object.__setattr__(self, "targets", tuple(sorted(self.targets)))
        object.__setattr__(self, "boxes", tuple(sorted(self.boxes)))

    def is_wall(self, cell: Cell) -> bool:
        r, c = cell
        return not (0 <= r < self.height and 0 <= c < self.width) or cell in self.walls

    @property
    def solved(self) -> bool:
        return set(self.boxes) == set(self.targets)

    @property
    def boxes_on_target(self) -> int:
        return len(set(self.boxes) & set(self.targets))

    def with_state(self, player: Cell, boxes) -> "Level":
        return Level(self.height, self.width, self.walls, self.targets, tuple(boxes), player)

    def render(self) -> str:
        targets, boxes = set(self.targets), set(self.boxes)

        def symbol(cell: Cell) -> str:
            if cell in self.walls:
                return WALL
            if cell in boxes:
                return BOX_ON_TARGET if cell in targets else BOX
            if cell == self.player:
                return PLAYER_ON_TARGET if cell in targets else PLAYER
            return TARGET if cell in targets else FLOOR
        return "\n".join(" ".join(symbol((r, c)) for c in range(self.width)) for r in range(self.height))


def push(level: Level, move: str) -> tuple[Level, bool]:
    """gym-sokoban's push-or-move rule: step into floor, or push a box one cell if the cell behind
    it is neither wall nor box. Returns (new level, whether the player moved)."""
    dr, dc = MOVES[move]
    pr, pc = level.player
    nxt = (pr + dr, pc + dc)
    if level.is_wall(nxt):
        return level, False
    boxes = level.boxes
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if level.is_wall(beyond) or beyond in boxes:
            return level, False
        boxes = tuple(beyond if b == nxt else b for b in boxes)
    return level.with_state(nxt, boxes), True


def parse_level(rows: list[str], where: str = "<level>", first_line: int = 1,
                line_numbers: list[int] | None = None) -> Level:
    """A level from its rows; errors name ``where:line`` (rows are on consecutive lines from
    ``first_line`` unless ``line_numbers`` says otherwise)."""
    rows = ["".join(r.split()) for r in rows]
    if not rows or not rows[0]:
        raise LevelFileError(f"{where}:{first_line}: empty level")
    nums = line_numbers or list(range(first_line, first_line + len(rows)))
    width = len(rows[0])
    walls, targets, boxes, players = set(), [], [], []
    for i, row in enumerate(rows):
        line = nums[i]
        if len(row) != width:
            raise LevelFileError(f"{where}:{line}: row has {len(row)} cells, the level's first row "
                                 f"has {width} (levels must be rectangular)")
        for c, ch in enumerate(row):
            cell = (i, c)
            if ch == WALL:
                walls.add(cell)
            elif ch in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                targets.append(cell)
            if ch in (BOX, BOX_ON_TARGET):
                boxes.append(cell)
            if ch in (PLAYER, PLAYER_ON_TARGET):
                players.append((line, cell))
            if ch not in SYMBOLS:
                raise LevelFileError(f"{where}:{line}: unknown symbol {ch!r} at column {c + 1} "
                                     f"(allowed: {' '.join(SYMBOLS)})")
    first_line, end = nums[0], nums[-1]
    if len(players) != 1:
        at = players[1][0] if len(players) > 1 else end
        raise LevelFileError(f"{where}:{at}: a level needs exactly one player (P or S), "
                             f"found {len(players)} in lines {first_line}-{end}")
    if not boxes:
        raise LevelFileError(f"{where}:{end}: level in lines {first_line}-{end} has no box")
    if len(boxes) != len(targets):
        raise LevelFileError(f"{where}:{end}: level in lines {first_line}-{end} has {len(boxes)} "
                             f"box(es) but {len(targets)} target(s)")
    return Level(len(rows), width, frozenset(walls), tuple(targets), tuple(boxes), players[0][1])


def load_levels(path: str | Path) -> list[Level]:
    """All levels of a level file, in file order; raises ``LevelFileError`` naming file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LevelFileError(f"{path}:0: cannot read level file ({e})") from None
    levels, block, nums = [], [], []
    for n, raw in enumerate(text.splitlines() + [""], start=1):
        line = raw.strip()
        if line.startswith(";"):
            continue
        if line:
            block.append(line)
            nums.append(n)
        elif block:
            levels.append(parse_level(block, str(path), nums[0], nums))
            block, nums = [], []
    if not levels:
        raise LevelFileError(f"{path}:1: no level in file")
    return levels
