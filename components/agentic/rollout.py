"""Multi-turn rollouts: a batch of episodes generated turn by turn through a ``RolloutEngine``.

An episode starts at a :class:`Start`: a map seed and an action prefix replayed without
generation (a VSR replay state; ``()`` = the initial state). Each turn, every live episode's
prompt (the environment's: instruction + last turns + current state) is tokenised; episodes
whose prompts are identical (the ``n`` episodes of a group at their first turn) share one
request with ``n`` samples, as the engine shares one prefill across a request's samples. The
engine meters every call (purpose as asked, tagged ``turn``), so generated tokens are counted
per turn. Each reply goes to ``env.step`` as text: an unparsable reply is the environment's
invalid move, never an error here.

What a turn keeps: its context ids (the prompt, observations included: context, never in the
loss), its response ids (the only tokens a loss may touch), the reward, the anchor state
(GiGPO's step grouping) and the action text. Replayed prefix turns have no record: they were not
generated.

Sampling seeds are a function of (``seed``, turn), so the same starts, model and seed give the
same episodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from components.algos.gigpo import Episode
from components.engine.base import RolloutEngine, Request, SamplingParams, split_runs
from components.envs.base import EnvError, replay

__all__ = ["Start", "TurnRecord", "EpisodeRun", "EpisodeGroup", "EpisodeContext", "rollout_episodes",
           "to_gigpo_episodes", "prompt_encoder", "success_rate"]


@dataclass(frozen=True)
class Start:
    seed: int                     # map seed
    prefix: tuple[str, ...] = ()  # replayed actions (context, not generated)
    group: str = ""               # episode-group id (GiGPO groups episodes by their start)
    n: int = 1                    # episodes from this start
    meta: tuple = ()              # method bookkeeping, e.g. (("alpha", 0.4),)

    def group_id(self) -> str:
        return self.group or f"{self.seed}@{len(self.prefix)}"


@dataclass
class TurnRecord:
    context_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    text: str
    reward: float
    anchor: str
    valid: bool
    finish_reason: str


@dataclass
class EpisodeRun:
    start: Start
    turns: list[TurnRecord] = field(default_factory=list)
    won: bool = False
    done: bool = False

    @property
    def actions(self) -> tuple[str, ...]:
        """Every action from reset: the replayed prefix, then the generated replies."""
        return tuple(self.start.prefix) + tuple(t.text for t in self.turns)

    @property
    def length(self) -> int:
        return len(self.start.prefix) + len(self.turns)

    @property
    def generated_tokens(self) -> int:
        return sum(len(t.response_ids) for t in self.turns)

    @property
    def episode_return(self) -> float:
        return float(sum(t.reward for t in self.turns))


@dataclass
class EpisodeGroup:
    """A start's episodes: what a method sees of them, under the names of a math ``Group``
    (``problem_uid`` is the map seed, a reward is 1 for a solved episode)."""
    start: Start
    runs: list[EpisodeRun]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return self.start.group_id()

    @property
    def problem_uid(self) -> int:
        return self.start.seed

    @property
    def rewards(self) -> list[float]:
        return [float(r.won) for r in self.runs]

    @property
    def is_replay(self) -> bool:
        return bool(self.start.prefix)

    @property
    def supervised(self) -> bool:
        return False          # episodes have no supervised (SFT) groups

    @property
    def prefix_len(self) -> int:
        return len(self.start.prefix)

    def trajectory(self, i: int, eos: int | None = None) -> list[str]:
        """Episode ``i``'s actions from reset (replayed prefix, then generated replies)."""
        return list(self.runs[i].actions)


@dataclass
class EpisodeContext:
    """What a method uses to roll out episodes: the episodic counterpart of
    ``components.methods.base.RolloutContext`` (an item is a :class:`Start`). One
    ``sample_groups`` call plays every start's episodes together, with the step's seed."""
    play: Callable[[Sequence[Start], int], list[EpisodeRun]]
    seed: int
    step: int = 0

    def prompt_items(self, seeds: Sequence[int]) -> list[Start]:
        return [Start(int(s), (), f"{s}") for s in seeds]

    def replay_item(self, seed: int, actions: Sequence[str], cut: int) -> Start:
        """The start that continues an episode of ``seed`` after its first ``cut`` actions."""
        return Start(int(seed), tuple(actions[:cut]), f"{seed}@{cut}")

    def sample_groups(self, items: Sequence[Start], n: int | Sequence[int]) -> list[EpisodeGroup]:
        ns = [n] * len(items) if isinstance(n, int) else list(n)
        starts = [replace(s, n=k) for s, k in zip(items, ns)]
        runs = self.play(starts, self.seed) if starts else []
        return [EpisodeGroup(s, r) for s, r in zip(starts, split_runs(runs, [s.n for s in starts]))]


def episode_runs(groups: Sequence[EpisodeGroup]) -> list[EpisodeRun]:
    """Every group's runs in order (the order they were played in)."""
    return [r for g in groups for r in g.runs]


def _encode(tokenizer, text: str) -> tuple[int, ...]:
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def prompt_encoder(tokenizer, template: str = "raw") -> Callable[[str], tuple[int, ...]]:
    """Prompt text -> context ids: as is (``raw``, the tiny policy) or as one user turn of the
    tokenizer's chat template (``chat``, instruction-tuned models)."""
    if template == "raw":
        return lambda text: _encode(tokenizer, text)
    if template == "chat":
        return lambda text: _encode(tokenizer, tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False))
    raise ValueError(f"unknown prompt template {template!r} (raw | chat)")


def rollout_episodes(engine: RolloutEngine, make_env: Callable, starts: Sequence[Start],
                     sampling: SamplingParams, purpose: str = "train_rollout",
                     encode: Callable[[str], tuple[int, ...]] | None = None,
                     max_prompt_len: int | None = None) -> list[EpisodeRun]:
    """Play every start's ``n`` episodes to the end; runs in start order, ``n`` per start.
    A prompt longer than ``max_prompt_len`` tokens raises (never silently truncated)."""
    tok = engine.tokenizer
    encode = encode or (lambda text: _encode(tok, text))
    runs, envs = [], []
    for s in starts:
        for _ in range(s.n):
            env, _ = replay(make_env, s.seed, s.prefix)
            if env.done:
                raise EnvError(f"{env.name}: replayed prefix of seed {s.seed} ({len(s.prefix)} actions) "
                               "ends the episode: nothing left to generate")
            runs.append(EpisodeRun(s))
            envs.append(env)
    turn = 0
    while True:
        live = [i for i, r in enumerate(runs) if not r.done]
        if not live:
            break
        by_prompt: dict[str, list[int]] = {}
        for i in live:
            by_prompt.setdefault(envs[i].prompt(), []).append(i)
        prompts = list(by_prompt)
        contexts = [encode(p) for p in prompts]
        for p, ctx in zip(prompts, contexts):
            if max_prompt_len is not None and len(ctx) > max_prompt_len:
                s = runs[by_prompt[p][0]].start
                raise ValueError(f"rollout: the turn-{turn} prompt of map seed {s.seed} has {len(ctx)} tokens, "
                                 f"above max_prompt_length {max_prompt_len}")
        reqs = [Request(ctx, n=len(by_prompt[p]), prompt_len=len(ctx), tag=str(runs[by_prompt[p][0]].start.seed))
                for p, ctx in zip(prompts, contexts)]
        seed = None if sampling.seed is None else sampling.seed + 7_919 * turn
        params = SamplingParams(sampling.temperature, sampling.top_p, sampling.max_new_tokens, seed)
        with engine.meter.tagged(turn=turn):
            outs = engine.generate(reqs, params, purpose=purpose)
        for p, ctx, comps in zip(prompts, contexts, outs):
            for i, c in zip(by_prompt[p], comps):
                env, run = envs[i], runs[i]
                anchor = env.anchor()
                _, reward, done, info = env.step(c.text)
                run.turns.append(TurnRecord(ctx, tuple(c.token_ids), c.text, float(reward), anchor,
                                            bool(info["action_is_valid"]), c.finish_reason))
                run.done, run.won = bool(done), bool(info["won"])
        turn += 1
    return runs


def success_rate(runs: Sequence[EpisodeRun]) -> float:
    """Share of runs that solved their episode (NaN for no runs)."""
    return sum(r.won for r in runs) / len(runs) if runs else float("nan")


def to_gigpo_episodes(runs: Sequence[EpisodeRun]) -> list[Episode]:
    """GiGPO's input: one episode per run over its generated turns, grouped by start."""
    return [Episode(r.start.group_id(), [t.anchor for t in r.turns], [t.reward for t in r.turns])
            for r in runs]
