"""The method protocol: a method decides *what to roll out* and, through typed hooks with
defaults, the few things a trainer must ask it.

Which prompts or replayed prefix states, how many samples each, in how many rounds, and
which samples reach the loss. It talks to a ``RolloutEngine`` and a grader through a
``RolloutContext`` and never to a training framework, so the embedded trainer and the verl
trainer share every method unchanged. Every method subclasses :class:`Method`; the
registry refuses a class that does not.

    method.setup(problems, resources)
    train_set = method.training_problems(problems)   # default: all of them
    groups = method.rollout(batch, ctx, rng)          # list[Group]
    method.observe(groups)                            # update buffers / posteriors / histories
    method.sample_advantages(g) / method.advantage_weight(g)   # per-sample advantage terms
    method.token_advantage_groups(groups) / method.token_advantages(...)   # per-token ones
    method.step_stats()                               # logged as method/<key> each step
    method.state_dict() / method.load_state_dict(state)
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Container, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from components.data.schema import Problem
from components.engine.base import Completion, Request, RolloutEngine, SamplingParams

if TYPE_CHECKING:
    import torch


class MethodConfig(BaseModel):
    """Base of every method's config: unknown keys are errors."""
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class Group:
    """One group of samples that share a context; advantages are computed within it."""
    uid: str                          # group id (advantage grouping key)
    problem_uid: str
    answer: str                       # gold answer used for grading
    context_ids: tuple[int, ...]      # prompt ids + replayed prefix ids (context: never in the loss)
    prompt_len: int                   # leading context ids that are the original prompt
    responses: list[tuple[int, ...]]  # generated ids per sample (the only tokens in the loss)
    texts: list[str]                  # full response text per sample (replayed prefix + generated)
    rewards: list[float]
    reasons: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    # sequence-level targets for supervised methods (SFT): loss = NLL instead of policy gradient
    supervised: bool = False

    @property
    def is_replay(self) -> bool:
        return len(self.context_ids) > self.prompt_len

    @property
    def prefix_len(self) -> int:
        return len(self.context_ids) - self.prompt_len

    @property
    def n(self) -> int:
        return len(self.responses)

    @property
    def mixed(self) -> bool:
        return len(set(self.rewards)) > 1

    def add_round(self, other: "Group", t: int) -> None:
        """``other``'s samples (round ``t`` on the same start state) appended to this group's,
        each recorded in ``meta["round_of_sample"]``."""
        self.responses += other.responses
        self.texts += other.texts
        self.rewards += other.rewards
        self.reasons += other.reasons
        self.finish_reasons += other.finish_reasons
        self.meta["round_of_sample"] += [t] * other.n

    def subset(self, idx: Sequence[int], meta: dict[str, Any]) -> "Group":
        """The samples ``idx`` (in that order) as a group of the same context, with ``meta``."""
        pick = lambda xs: [xs[i] for i in idx] if len(xs) == self.n else list(xs)  # noqa: E731
        return replace(self, responses=pick(self.responses), texts=pick(self.texts), rewards=pick(self.rewards),
                       reasons=pick(self.reasons), finish_reasons=pick(self.finish_reasons), meta=meta)

    def trajectory(self, i: int, eos: int | None = None) -> list[int]:
        """Sample ``i`` from the prompt on: the replayed prefix, then its response (EOS dropped)."""
        return list(self.context_ids[self.prompt_len:]) + [t for t in self.responses[i] if t != eos]


GradeFn = Callable[[list[str], list[str]], list[tuple[float, str]]]


@dataclass
class RolloutContext:
    """Everything a method may use to produce groups."""
    engine: RolloutEngine
    grade: GradeFn                      # (full response texts, golds) -> [(score, reason)]
    encode_prompt: Callable[[Problem], tuple[int, ...]]
    sampling: SamplingParams
    step: int = 0

    def prompt_items(self, problems: Sequence[Problem]) -> list[tuple]:
        """Items for ``sample_groups`` that start from the original prompts (no replayed prefix)."""
        return [(p, ids, "", len(ids), p.uid) for p, ids in zip(problems, map(self.encode_prompt, problems))]

    def replay_item(self, problem: Problem, trajectory: Sequence[int], cut: int) -> tuple:
        """The item that continues ``problem``'s ``trajectory`` after its first ``cut`` tokens."""
        prompt_ids = self.encode_prompt(problem)
        prefix = tuple(trajectory[:cut])
        text = self.engine.tokenizer.decode(list(prefix), skip_special_tokens=True)
        return (problem, tuple(prompt_ids) + prefix, text, len(prompt_ids), f"{problem.uid}@{cut}")

    def sample_groups(self, items: Sequence[tuple[Problem, tuple[int, ...], str, int, str]],
                      n: int | Sequence[int], purpose: str = "train_rollout",
                      seed_offset: int = 0) -> list[Group]:
        """Generate and grade one group per item.

        item = (problem, context_ids, prefix_text, prompt_len, group_uid). The response text
        that is graded is ``prefix_text + generated`` (a replayed prefix is part of the answer).
        """
        ns = [n] * len(items) if isinstance(n, int) else list(n)
        if not items:
            return []
        seed = None if self.sampling.seed is None else self.sampling.seed + 1_000_003 * self.step + seed_offset
        params = SamplingParams(temperature=self.sampling.temperature, top_p=self.sampling.top_p,
                                max_new_tokens=self.sampling.max_new_tokens, seed=seed)
        reqs = [Request(context_ids=tuple(ctx), n=k, prompt_len=plen, tag=guid)
                for (_, ctx, _, plen, guid), k in zip(items, ns)]
        outs: list[list[Completion]] = self.engine.generate(reqs, params, purpose=purpose)
        texts, golds = [], []
        for (prob, _, prefix_text, _, _), comps in zip(items, outs):
            for c in comps:
                texts.append(prefix_text + c.text)
                golds.append(prob.answer)
        graded = self.grade(texts, golds) if texts else []
        groups, i = [], 0
        for (prob, ctx, prefix_text, plen, guid), comps in zip(items, outs):
            g = graded[i:i + len(comps)]
            groups.append(Group(uid=guid, problem_uid=prob.uid, answer=prob.answer,
                                context_ids=tuple(ctx), prompt_len=plen,
                                responses=[c.token_ids for c in comps],
                                texts=texts[i:i + len(comps)],
                                rewards=[float(s) for s, _ in g], reasons=[r for _, r in g],
                                finish_reasons=[c.finish_reason for c in comps]))
            i += len(comps)
        return groups


class Method:
    """Base of every method: the protocol with its defaults.

    A subclass sets ``name`` and ``Config`` and implements ``rollout`` and
    ``rollouts_per_step``; every other hook has a default that is right for a method that
    keeps nothing between steps, trains on every problem and leaves advantages to the
    trainer's estimator. Torch is imported only by the hooks that take tensors, so building
    a method's config stays light.
    """
    name: ClassVar[str]
    Config: ClassVar[type[MethodConfig]]
    config: MethodConfig
    # True when ``token_advantages`` is implemented: a trainer that cannot compute per-token
    # advantages from the policy's entropy inside its loss (verl) refuses the method
    per_token_advantages: ClassVar[bool] = False

    # ---------------------------------------------------------------- lifecycle
    def __init__(self, config: MethodConfig):
        self.config = config
        self.last_stats: dict[str, float] = {}   # numbers about the last step (``step_stats``)

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        """Called once before training with the training problems and stage inputs."""

    def training_problems(self, problems: Sequence[Problem]) -> list[Problem]:
        """The problems the trainer draws its batches from (after ``setup``)."""
        return list(problems)

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext,
                rng: np.random.Generator) -> list[Group]:
        raise NotImplementedError(f"{type(self).__name__}.rollout")

    def rollouts_per_step(self, batch_size: int) -> int:
        """Rollouts one step generates for a batch of ``batch_size`` prompts (budget contract)."""
        raise NotImplementedError(f"{type(self).__name__}.rollouts_per_step")

    def observe(self, groups: list[Group]) -> None:
        """The step's groups, after rollout and before the update."""

    def step_stats(self) -> dict[str, float]:
        """Numbers about the last step, logged as ``method/<key>``: ``last_stats`` (a plug-in's
        ``__init__`` need not call this class's, so it may have none)."""
        return dict(getattr(self, "last_stats", {}))

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state a resumed run needs (checkpointed with the weights)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    # ---------------------------------------------------------------- advantage terms
    def sample_advantages(self, group: Group) -> Sequence[float] | None:
        """Exact advantages of the group's samples that replace the trainer's estimator
        (one per sample, in order), or None to use the estimator."""
        return None

    def advantage_weight(self, group: Group) -> float:
        """Factor on every advantage of the group (after ``sample_advantages``)."""
        return 1.0

    def token_advantage_groups(self, groups: Sequence[Group]) -> list[bool]:
        """Per group: True when its samples get per-token advantages from ``token_advantages``
        instead of the group's per-sample ones."""
        return [False] * len(groups)

    def token_advantages(self, entropy: torch.Tensor, mask: torch.Tensor,
                         rewards: torch.Tensor, rows: torch.Tensor | None = None,
                         logp: torch.Tensor | None = None) -> torch.Tensor:
        """[n, T] advantages for ``n`` samples of the groups ``token_advantage_groups`` chose,
        from the current policy's detached per-token entropy [n, T], the response mask [n, T]
        and the samples' rewards [n]; ``rows`` are the samples' indices among all samples of
        the groups last given to ``token_advantage_groups`` (in order) and ``logp`` the current
        policy's detached log-probs [n, T] (PG-OPD: teacher minus student log-prob per token).
        Only for ``per_token_advantages = True``."""
        raise NotImplementedError(f"{type(self).__name__} has no per-token advantages")


# methods that keep nothing between steps subclass this name for readability
Stateless = Method


def item_uid(item: Problem | int) -> str:
    """A training item's key in a method's state, the same on every task: a problem's uid, a
    map seed as text (JSON keys are text, so a resumed run's state finds the same keys)."""
    return item.uid if isinstance(item, Problem) else str(item)


def fresh_outcomes(groups: Sequence[Group], threshold: float,
                   known: Container[str] | None = None) -> dict[str, list[float]]:
    """Per problem uid: [successes (rewards > ``threshold``), samples] of the RL groups rolled out
    from the original prompt (no replayed prefix), only of the uids in ``known`` when given."""
    agg: dict[str, list[float]] = {}
    for g in groups:
        if g.is_replay or g.supervised or not g.rewards or (known is not None and g.problem_uid not in known):
            continue
        s = agg.setdefault(g.problem_uid, [0.0, 0.0])
        s[0] += sum(r > threshold for r in g.rewards)
        s[1] += len(g.rewards)
    return agg


def advantage_terms(method: Method, groups: Sequence[Group]) -> tuple[list[float], list[float]]:
    """Per sample of ``groups`` in order: the method's exact advantage (NaN: use the
    trainer's estimator) and its group's advantage weight. What both backends apply."""
    fixed: list[float] = []
    weight: list[float] = []
    for g in groups:
        adv = method.sample_advantages(g)
        if adv is None:
            fixed.extend([float("nan")] * g.n)
        else:
            if len(adv) != g.n:
                raise ValueError(f"{method.name}: {len(adv)} advantages for group {g.uid} of {g.n} samples")
            fixed.extend(float(a) for a in adv)
        weight.extend([float(method.advantage_weight(g))] * g.n)
    return fixed, weight
