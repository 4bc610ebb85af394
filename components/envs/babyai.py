"""BabyAI (Chevalier-Boisvert et al. 2018) through ``minigrid`` 3.x, as a text environment.

Levels used by the VSR paper (Section 5): ``BabyAI-SynthLoc-v0``, ``BabyAI-OneRoomS8-v0``,
``BabyAI-MiniBossLevel-v0``; any registered BabyAI/MiniGrid id works. minigrid gives a 7x7
egocentric symbolic view (``obs["image"][x, y] = (object, colour, state)``, the agent at
x = 3, y = 6 facing "up" in view coordinates) and a mission string; :func:`describe_view`
turns them into text. The paper does not publish its describer; this one (our choice) lists
what is directly ahead, the distance to the nearest wall ahead / left / right on the agent's
lines of sight, and every visible object with its colour, door state and position relative to
the agent ("2 steps ahead, 1 step to the left"), nearest first, plus what the agent carries.

Actions are minigrid's seven, as words: turn left, turn right, go forward, pick up, drop,
toggle, done (``left``/``right``/``forward``/``pickup`` accepted as aliases, our choice). The
reward is minigrid's (``1 - 0.9 * step_count / max_steps`` on success, 0 otherwise); a mission
failure (e.g. picking up the wrong object) ends the episode unsolved. An unparsable reply is
not sent to minigrid: no move, reward ``-invalid_penalty`` (0.1, verl-agent's
``invalid_action_penalty_coef``; see ``TextEnv``).

Compact encoding (``template: compact``, our choice): the embedded character-level policy has
192 positions, and the describer's text is 200-500 characters per state. The compact template
puts the mission once, on the prompt's first line, and shows each state as
:func:`describe_compact`: facing and carried object, what is directly ahead, the wall distances
ahead/left/right, then every visible object as a 2-3 character code with its position
(``eo@2,-1``: a grey ball 2 ahead, 1 to the left), nearest first. The same information as
:func:`describe_view` but the mission, in ~30-60 characters (``KIND_CODE``, ``COLOUR_CODE``).
The anchor (GiGPO's step grouping) is the full text either way.

``max_steps`` (turns) defaults to the level's own limit for the episode's mission (our choice: the paper states none, and
verl-agent has no BabyAI config). Expert trajectories come from minigrid's ``BabyAIBot``
(:func:`expert_actions`).
"""
from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field

from components.envs.base import TextEnv
from components.envs.registry import register

__all__ = ["BabyAIEnv", "ACTIONS", "PAPER_LEVELS", "describe_view", "describe_compact", "expert_actions",
           "parse_action", "KIND_CODE", "COLOUR_CODE"]

PAPER_LEVELS = ("BabyAI-SynthLoc-v0", "BabyAI-OneRoomS8-v0", "BabyAI-MiniBossLevel-v0")
ACTIONS = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle", "done")
_ALIASES = {"left": "turn left", "right": "turn right", "forward": "go forward",
            "pickup": "pick up", "move forward": "go forward"}
_TAG = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)
_DIRECTIONS = ("east", "south", "west", "north")   # minigrid agent_dir 0..3
_NOT_OBJECTS = {"unseen", "empty", "wall", "floor", "agent"}
# compact codes (one character each; a door adds its state: open "", closed "c", locked "l")
KIND_CODE = {"key": "k", "ball": "o", "box": "x", "door": "d", "goal": "g", "lava": "v"}
COLOUR_CODE = {"red": "r", "green": "g", "blue": "b", "purple": "p", "yellow": "y", "grey": "e"}
_DOOR_CODE = {0: "", 1: "c", 2: "l"}
# cells that are no object, as the describer and the compact code write them
_CELL_TEXT = {"wall": "a wall", "unseen": "an unseen cell", "empty": "empty floor", "floor": "empty floor"}
_CELL_CODE = {"wall": "#", "unseen": "?", "empty": ".", "floor": "."}

INSTRUCTION = """You are an agent in a BabyAI grid world. Complete the mission.
You see a 7x7 area in front of you; positions are given relative to you.
"turn left"/"turn right" turn in place, "go forward" moves one cell, "pick up" takes the object
in front of you, "drop" puts the carried object in front of you, "toggle" opens/closes the door
or box in front of you."""


def parse_action(text: str) -> str | None:
    m = _TAG.search(text)
    body = (m.group(1) if m else text).lower()
    body = " ".join(re.sub(r"[^a-z ]", " ", body).split())
    body = _ALIASES.get(body, body)
    return body if body in ACTIONS else None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _where(fwd: int, lat: int) -> str:
    parts = []
    if fwd:
        parts.append(f"{_plural(fwd, 'step')} ahead")
    if lat:
        parts.append(f"{_plural(abs(lat), 'step')} to the {'right' if lat > 0 else 'left'}")
    return ", ".join(parts)


def _view(image):
    """(cell, nearest-wall distances, visible objects nearest first) of a 7x7 egocentric view;
    an object is (forward, lateral, kind, colour, state), lateral > 0 = to the right."""
    from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT

    size = image.shape[0]
    ax, ay = size // 2, size - 1

    def cell(x, y):
        kind, colour, state = (int(v) for v in image[x, y])
        return IDX_TO_OBJECT[kind], IDX_TO_COLOR[colour], state

    def wall_distance(cells):
        for k, (x, y) in enumerate(cells, start=1):
            kind = cell(x, y)[0]
            if kind == "wall":
                return k
            if kind == "unseen":
                break
        return None

    walls = (wall_distance([(ax, y) for y in range(ay - 1, -1, -1)]),
             wall_distance([(x, ay) for x in range(ax - 1, -1, -1)]),
             wall_distance([(x, ay) for x in range(ax + 1, size)]))
    seen = []
    for x in range(size):
        for y in range(size):
            if (x, y) == (ax, ay) or cell(x, y)[0] in _NOT_OBJECTS:
                continue
            fwd, lat = ay - y, x - ax
            seen.append((abs(fwd) + abs(lat), fwd, lat, *cell(x, y)))
    objects = [o[1:] for o in sorted(seen)]
    return cell, (ax, ay - 1), walls, objects


def describe_view(image, direction: int, mission: str, carrying=None) -> str:
    """Text for one minigrid observation (see the module docstring)."""
    states = {0: "open", 1: "closed", 2: "locked"}
    cell, ahead, walls, objects = _view(image)

    def name(kind, colour, state):
        if kind == "door":
            return f"{'an' if state == 0 else 'a'} {states[state]} {colour} door"
        return _CELL_TEXT.get(kind) or f"a {colour} {kind}"

    def dist(k):
        return "not visible" if k is None else _plural(k, "step")

    lines = [f"Mission: {mission}",
             f"You face {_DIRECTIONS[int(direction)]}. You carry "
             + (f"a {carrying.color} {carrying.type}." if carrying is not None else "nothing."),
             f"Directly ahead: {name(*cell(*ahead))}.",
             f"Nearest wall: ahead {dist(walls[0])}, left {dist(walls[1])}, right {dist(walls[2])}."]
    if objects:
        lines.append("You see:")
        lines += [f"- {name(kind, colour, state)}: {_where(fwd, lat)}" for fwd, lat, kind, colour, state in objects]
    else:
        lines.append("You see no objects.")
    return "\n".join(lines)


def _code(kind: str, colour: str, state: int) -> str:
    if kind in _CELL_CODE:
        return _CELL_CODE[kind]
    return COLOUR_CODE[colour] + KIND_CODE[kind] + (_DOOR_CODE[state] if kind == "door" else "")


def describe_compact(image, direction: int, carrying=None) -> str:
    """The compact encoding of one observation (see the module docstring), e.g.
    ``N- . w6,1,?`` then ``eo@0,3``: facing north, carrying nothing, empty floor ahead, walls 6
    ahead, 1 left, none visible right; a grey ball 0 ahead, 3 to the right."""
    cell, ahead, walls, objects = _view(image)
    held = "-" if carrying is None else _code(carrying.type, carrying.color, 0)
    head = (f"{'ESWN'[int(direction)]}{held} {_code(*cell(*ahead))} w"
            + ",".join("?" if k is None else str(k) for k in walls))
    return "\n".join([head] + [f"{_code(kind, colour, state)}@{fwd},{lat}" for fwd, lat, kind, colour, state in objects])


def _make(level: str):
    import gymnasium as gym
    import minigrid  # noqa: F401  (registers the MiniGrid and BabyAI ids)

    return gym.make(level, disable_env_checker=True).unwrapped


def _quiet_reset(env, seed: int):
    # BabyAI level generation prints its rejection-sampling retries to stdout
    with contextlib.redirect_stdout(io.StringIO()):
        return env.reset(seed=seed)


@register("babyai")
@dataclass
class BabyAIEnv(TextEnv):
    level: str = "BabyAI-OneRoomS8-v0"
    max_steps: int | None = None
    name: str = field(default="babyai", init=False)
    instruction: str = field(default=INSTRUCTION, init=False)

    def __post_init__(self):
        try:
            self._env = _make(self.level)
        except Exception as e:   # gymnasium raises its own error types for unknown ids
            raise ValueError(f"babyai: cannot make level {self.level!r}: {e}") from None
        # BabyAI sets its step limit when it generates a mission (it depends on the seed)
        self._level_limit = self.max_steps is None
        if self._level_limit:
            self.max_steps = 1
        super().__post_init__()
        self._obs = None

    def _new_game(self, seed: int) -> None:
        self._obs, _ = _quiet_reset(self._env, seed)
        if self._level_limit:
            self.max_steps = int(self._env.max_steps)
        # the compact template's first line: the mission, once per prompt
        self.short_instruction = self._obs["mission"]
        self._bot, self._bot_step, self._last_action = None, -1, None

    def _parse(self, action_text: str) -> int | None:
        name = parse_action(action_text)
        return None if name is None else ACTIONS.index(name)

    def _action_name(self, action: int) -> str:
        return ACTIONS[action]

    def _apply(self, action: int) -> tuple[float, bool, bool]:
        self._last_action = action
        self._obs, reward, terminated, truncated, _ = self._env.step(action)
        won = bool(terminated and reward > 0)
        return float(reward), won, bool(terminated or truncated)

    def _state_text(self) -> str:
        return describe_view(self._obs["image"], self._obs["direction"], self._obs["mission"],
                             self._env.carrying)

    def _compact_state(self) -> str:
        return describe_compact(self._obs["image"], self._obs["direction"], self._env.carrying)

    def admissible_actions(self) -> list[str]:
        return list(ACTIONS)

    def solver_action(self) -> str | None:
        """minigrid's ``BabyAIBot`` from the current state (the behaviour-cloning expert). The
        bot follows the episode: it is told the action actually taken (a noisy demonstrator's
        random move included) and is rebuilt from the current state when it missed a turn
        (a replayed prefix). None when it has no suggestion or fails (bc then moves at random)."""
        from minigrid.utils.baby_ai_bot import BabyAIBot

        try:
            if self._bot is None or self._bot_step != self.steps - 1:
                self._bot, taken = BabyAIBot(self._env), None
            else:
                taken = self._last_action
            action = int(self._bot.replan(taken))
        except Exception:   # the bot asserts on states it cannot plan from (e.g. a blocked door)
            self._bot = None
            return None
        self._bot_step = self.steps
        return ACTIONS[action]


def expert_actions(level: str, seed: int, max_steps: int | None = None) -> list[str]:
    """minigrid's ``BabyAIBot`` plan for (level, seed) as action words; raises if it fails."""
    from minigrid.utils.baby_ai_bot import BabyAIBot

    env = _make(level)
    _quiet_reset(env, seed)
    bot = BabyAIBot(env)
    limit = max_steps or env.max_steps
    actions = []
    for _ in range(limit):
        a = int(bot.replan())
        actions.append(ACTIONS[a])
        _, reward, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            if terminated and reward > 0:
                return actions
            break
    raise RuntimeError(f"babyai: BabyAIBot did not solve {level} seed {seed} in {limit} steps")
