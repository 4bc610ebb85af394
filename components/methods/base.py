"""The method protocol: a method decides *what to roll out*.

Which prompts or replayed prefix states, how many samples each, in how many rounds,
and which samples reach the loss. It talks to a ``RolloutEngine`` and a grader
through a ``RolloutContext`` and never to a training framework, so the embedded
trainer and the verl trainer share every method unchanged.

    groups = method.rollout(batch, ctx, rng)   # list[Group]
    method.observe(groups)                     # update buffers / posteriors / histories
    method.state_dict() / method.load_state_dict(state)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from components.data.schema import Problem
from components.engine.base import Completion, Request, RolloutEngine, SamplingParams


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
        out = []
        for p in problems:
            ids = self.encode_prompt(p)
            out.append((p, ids, "", len(ids), p.uid))
        return out

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


class Stateless:
    """Protocol defaults for a method that keeps nothing between steps."""

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        pass

    def observe(self, groups: list[Group]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class Method(Protocol):
    name: str
    config: MethodConfig

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        """Called once before training with the training problems and stage inputs."""

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext,
                rng: np.random.Generator) -> list[Group]: ...

    def observe(self, groups: list[Group]) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def rollouts_per_step(self, batch_size: int) -> int:
        """Rollouts one step generates for a batch of ``batch_size`` prompts (budget contract)."""
