"""DAPO dynamic sampling and overlong reward shaping (docs/methods.md §8).

Source: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale"
(arXiv 2503.14476); verl ``recipe/dapo`` (``filter_groups`` in the DAPO ray trainer,
``DAPORewardManager`` for the overlong buffer, ``run_dapo_qwen2.5_32b.sh`` for defaults).

Dynamic sampling, as adapted to a trainer that hands the method a fixed batch:

1. generation round 0 rolls out the given batch (``n`` samples per prompt), plus
   ``ceil(gen_batch_multiplier * B) - B`` extra prompts drawn as in step 3 (default 3: the
   DAPO script's ``gen_batch_size`` = 3 x ``train_batch_size`` prompts per round);
2. a group is kept when the std of its ``acc`` (the grader's reward, before overlong
   shaping; verl ``metric=acc``) is > 0, or when it has one sample (as verl);
3. while fewer than ``B`` groups are kept, another round rolls out
   ``ceil(gen_batch_multiplier * B)`` prompts drawn with the step's rng, without
   replacement, from the training problems (``setup``) not yet used this step; at most
   ``max_num_gen_batches`` rounds in all (verl raises after that; here ``on_shortfall``
   chooses ``"return"`` the groups kept so far (default [INF]) or ``"raise"``);
4. the kept groups are truncated to ``B`` (in generation order).

Every generated group that is not returned (zero std, or beyond ``B``) has its
generated tokens and sequences moved to meter purpose ``"discarded"``.

Overlong shaping (verl's version): ``overlong_penalty`` below is added to the rewards of
the returned groups when ``overlong_buffer_len > 0`` (default 0 = off). ``max_response_len``
defaults to the trainer's ``max_new_tokens``.

``rollouts_per_step(B)`` is the *minimum* (one round: ``ceil(mult x B)`` prompts, or the
whole training set when it is smaller); the number actually generated in the last step is
``last_stats["rollouts"]`` (rounds x ceil(mult x B) x n when the problem pool does not run
out).

Not in this module (trainer settings a DAPO sweep sets in ``TrainConfig``): clip-higher
``clip_low=0.2, clip_high=0.28``; token-level loss ``loss_agg_mode="token-mean"``;
``adv_estimator="grpo"``; ``kl_coef=0``.
"""
from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from components.data.schema import Problem
from components.methods.base import Group, MethodConfig, RolloutContext, Stateless


def overlong_penalty(length: int, max_len: int, buffer_len: int, factor: float = 1.0) -> float:
    """verl ``DAPORewardManager``: ``min(-(L - (L_max - L_buf)) / L_buf * factor, 0)``.

    Clamped at ``-factor`` beyond ``L_max`` (verl never sees such lengths: responses are
    truncated at ``L_max``; docs/methods.md TV10 gives -1 at 21000 > 20480). ``buffer_len <= 0``
    means no shaping.
    """
    if buffer_len <= 0:
        return 0.0
    expected = max_len - buffer_len
    exceed = length - expected
    return float(max(min(-exceed / buffer_len * factor, 0.0), -factor))


class DAPOConfig(MethodConfig):
    n: int = Field(16, ge=1, description="samples per prompt (DAPO script: 16)")
    max_num_gen_batches: int = Field(10, ge=1, description="generation rounds per step at most")
    gen_batch_multiplier: float = Field(3.0, ge=1.0, description="prompts per round / batch size (script: 3)")
    on_shortfall: Literal["return", "raise"] = "return"
    overlong_buffer_len: int = Field(0, ge=0, description="L_cache; 0 disables overlong shaping")
    max_response_len: int | None = Field(None, ge=1, description="L_max; None = sampling max_new_tokens")
    overlong_penalty_factor: float = Field(1.0, ge=0.0)


def _keep(g: Group) -> bool:
    return len(g.rewards) == 1 or float(np.std(g.rewards)) > 0


def draw_unused(pool: Sequence[Problem], k: int, used: set[str], rng: np.random.Generator) -> list[Problem]:
    """Up to ``k`` problems of ``pool`` whose uid is not in ``used``, drawn without replacement."""
    left = [p for p in pool if p.uid not in used]
    if k <= 0 or not left:
        return []
    return [left[i] for i in rng.choice(len(left), size=min(k, len(left)), replace=False).tolist()]


def discard(ctx: RolloutContext, groups: Sequence[Group], keep_idx: Sequence[Sequence[int]] | None = None) -> None:
    """Move the generated tokens of ``groups`` (or of the samples NOT in ``keep_idx[j]``) to "discarded"."""
    dropped = [r for j, g in enumerate(groups) for i, r in enumerate(g.responses)
               if keep_idx is None or i not in keep_idx[j]]
    if dropped:
        ctx.engine.meter.reclassify("discarded", sum(map(len, dropped)), len(dropped))


class DAPO(Stateless):
    name = "dapo"
    Config = DAPOConfig

    def __init__(self, config: DAPOConfig):
        super().__init__(config)
        self.problems: list[Problem] = []

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        self.problems = list(problems)

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        c, B = self.config, len(batch)
        per_round = math.ceil(c.gen_batch_multiplier * B - 1e-9)
        used = {p.uid for p in batch}
        probs = list(batch) + draw_unused(self.problems, per_round - B, used, rng)
        kept: list[Group] = []
        dropped: list[Group] = []
        rounds = rollouts = 0
        while probs:
            used |= {p.uid for p in probs}
            groups = ctx.sample_groups(ctx.prompt_items(probs), c.n, seed_offset=rounds)
            rounds += 1
            rollouts += sum(g.n for g in groups)
            for g in groups:
                (kept if _keep(g) else dropped).append(g)
            if len(kept) >= B or rounds >= c.max_num_gen_batches:
                break
            probs = draw_unused(self.problems, per_round, used, rng)
        dropped += kept[B:]
        kept = kept[:B]
        discard(ctx, dropped)
        self.last_stats = {"gen_rounds": float(rounds), "rollouts": float(rollouts),
                           "kept_groups": float(len(kept)), "discarded_groups": float(len(dropped))}
        if len(kept) < B and c.on_shortfall == "raise":
            raise RuntimeError(f"dapo: {len(kept)}/{B} groups with reward std > 0 after {rounds} "
                               f"generation rounds (max_num_gen_batches={c.max_num_gen_batches})")
        self._shape(kept, ctx)
        return kept

    def _shape(self, groups: list[Group], ctx: RolloutContext) -> None:
        c = self.config
        L = c.max_response_len or ctx.sampling.max_new_tokens
        for g in groups:
            g.meta["acc"] = list(g.rewards)
            if c.overlong_buffer_len > 0:
                pen = [overlong_penalty(len(r), L, c.overlong_buffer_len, c.overlong_penalty_factor)
                       for r in g.responses]
                g.rewards = [r + p for r, p in zip(g.rewards, pen)]
                g.meta["overlong_penalty"] = pen

    def rollouts_per_step(self, batch_size: int) -> int:
        """Rollouts of one generation round (the minimum a step generates): round 0 takes
        the batch and tops it up from the training set given to ``setup``, if there is one."""
        per_round = math.ceil(self.config.gen_batch_multiplier * batch_size - 1e-9)
        if self.problems:
            per_round = min(per_round, max(batch_size, len(self.problems)))
        return per_round * self.config.n
