"""The text-environment protocol shared by every multi-turn task, and the prompt/history wrapper.

An environment is a deterministic function of (seed, action texts so far):

* ``reset(seed) -> str``: the first observation text (the prompt the policy sees);
* ``step(action_text) -> StepResult(observation, reward, done, info)``: one turn;
* ``anchor() -> str``: the bare current state text, without instruction or history. GiGPO groups
  steps by identical anchor observations (Feng et al. 2025, arXiv 2505.10978, section 4; verl-agent
  passes the raw environment observation as ``anchor_obs``), so the anchor must not contain
  history: two episodes reaching the same board by different paths share a step group.

``info`` always holds ``action_is_valid`` (the text parsed to an admissible action), ``won``
(the task is solved) and ``truncated`` (the turn budget ran out unsolved).

Observation = prompt text: instruction + the last ``history_turns`` (observation, action) pairs
+ the current state + the admissible actions. This follows verl-agent's ``SOKOBAN_TEMPLATE``
(``agent_system/environments/prompts/sokoban.py``: "Prior to this step, you have already taken
{step_count} step(s). Below are the most recent {history_length} observations and the
corresponding actions you took"), with ``history_length`` = 2. The wording is
ours and shorter (a tiny embedded policy reads it too).

Replay (:func:`replay`): reset(seed) then step the action prefix. Environments keep no hidden
randomness outside the seed, so a replayed prefix gives the same state, prompt and rewards:
this is how VSR restores a turn-prefix replay state.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Protocol, Sequence, runtime_checkable

__all__ = ["Environment", "StepResult", "Turn", "TextEnv", "replay", "EnvError"]


class EnvError(RuntimeError):
    """An environment used out of protocol (step before reset, step after done)."""


class StepResult(NamedTuple):
    observation: str
    reward: float
    done: bool
    info: dict


@runtime_checkable
class Environment(Protocol):
    name: str
    max_steps: int

    def reset(self, seed: int) -> str: ...

    def step(self, action: str) -> StepResult: ...

    def anchor(self) -> str: ...

    def admissible_actions(self) -> list[str]: ...


@dataclass
class Turn:
    """One past turn: the state the action was taken in, the reply as written (the replay record)
    and what the history shows (the parsed action, or the reply marked invalid)."""
    state: str
    action: str
    valid: bool
    shown: str


@dataclass
class TextEnv:
    """Base class: turn counting, history and prompt; subclasses implement the game.

    Subclasses provide ``name``, ``instruction`` and ``_new_game(seed)``, ``_parse(action_text)``
    (admissible action or None), ``_apply(action) -> (reward, won)``, ``_state_text()`` and
    ``admissible_actions()``. ``_apply`` returns (reward, won, game_over): a game may end unsolved
    (BabyAI fails a mission on a wrong pick-up). An unparsable action never reaches the game: no move, reward
    ``-invalid_penalty`` (verl-agent: the environment returns 0 for its INVALID_ACTION and the
    trainer subtracts ``invalid_action_penalty_coef`` = 0.1, set in its run scripts; we fold that
    into the environment reward so every backend sees the same number). The turn still counts
    towards ``max_steps`` (verl-agent's rollout loop runs ``env.max_steps`` turns whatever the
    model writes).
    """
    max_steps: int = 15
    history_turns: int = 2
    invalid_penalty: float = 0.1
    # "full": verl-agent's prompt shape (below); "compact": the same parts (a one-line
    # instruction, the last ``history_turns`` states and actions, the current state) in as few
    # characters as possible, for the embedded character-level policy, whose cost grows with
    # the prompt length (every turn of every episode is a training row with its own prompt)
    template: str = "full"
    name: str = field(default="", init=False)
    instruction: str = field(default="", init=False)
    short_instruction: str = field(default="", init=False)

    def __post_init__(self):
        if self.max_steps < 1:
            raise ValueError(f"{self.name}: max_steps must be >= 1, got {self.max_steps}")
        if self.history_turns < 0:
            raise ValueError(f"{self.name}: history_turns must be >= 0, got {self.history_turns}")
        if self.template not in ("full", "compact"):
            raise ValueError(f"{self.name}: template must be 'full' or 'compact', got {self.template!r}")
        self._seed: int | None = None
        self._done = True
        self._turns: list[Turn] = []

    # -- subclass hooks ----------------------------------------------------------------------
    def _new_game(self, seed: int) -> None:
        raise NotImplementedError

    def _parse(self, action_text: str) -> Any | None:
        raise NotImplementedError

    def _apply(self, action: Any) -> tuple[float, bool, bool]:
        raise NotImplementedError

    def _action_name(self, action: Any) -> str:
        return str(action)

    def _state_text(self) -> str:
        raise NotImplementedError

    def admissible_actions(self) -> list[str]:
        raise NotImplementedError

    def _compact_state(self) -> str:
        """The state for the compact template (default: the anchor text)."""
        return self._state_text()

    # -- protocol ----------------------------------------------------------------------------
    @property
    def seed(self) -> int | None:
        return self._seed

    @property
    def steps(self) -> int:
        return len(self._turns)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def actions(self) -> list[str]:
        """The action texts taken so far (the replay prefix)."""
        return [t.action for t in self._turns]

    def reset(self, seed: int) -> str:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"{self.name}: seed must be an int, got {seed!r}")
        self._seed = seed
        self._turns = []
        self._done = False
        self._won = False
        self._new_game(seed)
        return self.prompt()

    def step(self, action: str) -> StepResult:
        if self._seed is None:
            raise EnvError(f"{self.name}: step() before reset()")
        if self._done:
            raise EnvError(f"{self.name}: step() after the episode ended (seed {self._seed}, "
                           f"{self.steps} turns)")
        if not isinstance(action, str):
            action = "" if action is None else str(action)
        state_before = self.state_text()
        parsed = self._parse(action)
        if parsed is None:
            reward, won, over = -self.invalid_penalty, False, False
        else:
            reward, won, over = self._apply(parsed)
        if parsed is not None:
            shown = self._action_name(parsed)
        else:
            shown = "?" if self.template == "compact" else f"{action.strip()[:80]!r} (invalid, no move)"
        self._turns.append(Turn(state_before, action, parsed is not None, shown))
        self._won = won
        truncated = not (won or over) and self.steps >= self.max_steps
        self._done = won or over or truncated
        info = {"action_is_valid": parsed is not None, "won": won, "truncated": truncated,
                "step": self.steps, "anchor": self._state_text()}
        return StepResult(self.prompt(), float(reward), self._done, info)

    def state_text(self) -> str:
        """The current state as the prompt template shows it (compact or full)."""
        if self._seed is None:
            raise EnvError(f"{self.name}: state_text() before reset()")
        return self._compact_state() if self.template == "compact" else self._state_text()

    def anchor(self) -> str:
        if self._seed is None:
            raise EnvError(f"{self.name}: anchor() before reset()")
        return self._state_text()

    @property
    def won(self) -> bool:
        return bool(getattr(self, "_won", False))

    def prompt(self) -> str:
        """Instruction + recent history + current state + admissible actions."""
        recent = self._turns[-self.history_turns:] if self.history_turns else []
        if self.template == "compact":
            # "<instruction>\n" then "<state>\n><action>\n" per recent turn ("?" = invalid)
            # then "<state>\n>": the reply continues after ">"
            parts = [self.short_instruction or self.name] + [f"{t.state}\n>{t.shown}" for t in recent]
            return "\n".join(parts + [self._compact_state() + "\n>"])
        lines = [self.instruction.strip(), ""]
        if self._turns:
            lines.append(f"You have taken {self.steps} step(s). The last {len(recent)} "
                         f"observation(s) and your action(s):")
            for k, t in enumerate(recent, start=self.steps - len(recent) + 1):
                lines += [f"[Step {k}] observation:", t.state, f"[Step {k}] action: {t.shown}"]
            lines.append("")
        lines += [f"Current observation (step {self.steps + 1}):", self._state_text(),
                  "Admissible actions: " + ", ".join(self.admissible_actions()) + ".",
                  "Answer with one action inside <action></action>."]
        return "\n".join(lines)


def replay(make_env: Callable[[], Environment], seed: int, actions: Sequence[str]
           ) -> tuple[Environment, list[StepResult]]:
    """A fresh environment reset to ``seed`` with ``actions`` stepped in order (a VSR replay state).

    Raises if the prefix runs past the end of the episode: a replay state is always a strict
    prefix of a recorded episode, so this means the record and the environment disagree.
    """
    env = make_env()
    env.reset(seed)
    results = []
    for i, a in enumerate(actions):
        if getattr(env, "done", False):
            raise EnvError(f"{env.name}: replay of seed {seed} ended at action {i} of {len(actions)}")
        results.append(env.step(a))
    return env, results
