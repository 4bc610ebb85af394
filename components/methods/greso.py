"""GRESO: pre-rollout selective rollout by temporal consistency (Zheng et al., NeurIPS 2025,
arXiv 2506.02177; official code Infini-AI-Lab/GRESO ``presampling_selector.py``). docs/methods.md
section 6.

State: a per-prompt trace of (training step, mean reward of its group) for every time the
prompt was rolled out, plus the global keep bases ``p_easy`` and ``p_hard``.

Pre-rollout rule (``all_probabilistic``), for a prompt with a non-empty trace
(:func:`skip_probability`):

- easy: z_e = number of most recent consecutive entries with mean >= 0.98 (all correct);
  if z_e > 0, skip with probability 1 - max(p_easy ** z_e, 0.01);
- hard: only if the latest mean <= 0.11; z_h = most recent consecutive entries with
  mean <= 0.11; skip with probability 1 - max(p_hard ** z_h, 0.01);
- a prompt without history is never skipped.

Exploration adaptation, after each observed batch once ``epoch >= adapt_from_epoch`` (the
official code adapts for epoch > 0): among the groups rolled out in that batch,
easy ratio = share with mean >= 0.98 and hard ratio = share with mean <= 0.11;
p_easy -= 0.01 if easy ratio >= target/3 else += 0.01, p_hard likewise with 2*target/3,
target_zero_variance = 0.25; both clamped to [0.05, 0.95], initial 0.5. (Values are rounded
to 1e-9 after each step so that +-0.01 walks do not accumulate float noise.)

Batch filling, ``batch_filling="fixed"`` (default): the budget contract of this project: a
step always rolls out exactly ``batch_size`` groups of ``n``. A batch prompt that is skipped
is replaced by further prompts drawn (seeded by the step rng) from the training set given to
``setup``, each subject to the same skip rule, examining at most
``ceil(max_draw_factor * batch_size)`` candidates. If the batch is still short, the skipped
prompts with the lowest skip probability are rolled out anyway ("forced"). No post-rollout
filtering: zero-variance groups reach the trainer and contribute no policy gradient.

``batch_filling="adaptive"``: the official trainer's filling (``ray_trainer.py``,
``ttis.type=dynamic_sampling``; docs/methods.md §6). The candidates are the batch, then the
rest of the training set in a permutation drawn from the step rng, each once, each subject to
the skip rule. Round 0 rolls out ``S = ceil(sampling_batch_factor * B)`` selected prompts
(script: sampling_batch_size 384 for real_train_batch_size 256, factor 1.5); groups with
zero reward variance are dropped and the rest accumulate. While fewer than ``B`` groups are
kept, the next round's size is :func:`next_sampling_size`:
``max(min(int(remaining / (1 - zv) / n * beta), S), S_min)`` with ``remaining`` the missing
trajectories, ``zv`` the last round's zero-variance share, beta = 1.25 and
``S_min = ceil(min_sampling_factor * B)`` (script: 64 of 256); a round whose estimate is
at most ``S`` is the last one (the step trains on what it has then), and so is a round that
uses up the candidates. Kept groups beyond ``B`` and the dropped ones are metered as
``"discarded"``. Every group rolled out, kept or not, enters the traces and the easy/hard
ratios (the official code records rewards before filtering). ``rollouts_per_step(B)`` is then
round 0's ``S * n`` (the minimum when S candidates pass the skip rule); ``last_stats["rollouts"]``
is what the step generated.

Epoch index: ``step * batch_size // len(training set)``, matching the trainer's batch order.
Variants: docs/methods.md and the official scripts it cites do not distinguish GRESO-R / GRESO-G,
so only one GRESO is implemented. Mean rewards are used as given (0/1 rewards assumed, so
0.98 / 0.11 mean all correct / all wrong for n <= 9).
"""
from __future__ import annotations

import math
from itertools import takewhile
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from components.data.schema import Problem
from components.methods.base import Group, Method, RolloutContext
from components.methods.dapo import discard
from components.methods.difficulty_graph import DifficultyChoice, graph_error, graph_estimator, graph_skip_probability


class GRESOConfig(DifficultyChoice):   # difficulty: graph = skip on the graph estimator's p (graph_skip_probability)
    n: int = Field(8, ge=1, description="samples per prompt")
    p_easy_init: float = Field(0.5, ge=0.0, le=1.0)
    p_hard_init: float = Field(0.5, ge=0.0, le=1.0)
    easy_threshold: float = Field(0.98, description="group mean >= this counts as easy (all correct)")
    hard_threshold: float = Field(0.11, description="group mean <= this counts as hard (all wrong)")
    min_keep_prob: float = Field(0.01, ge=0.0, le=1.0, description="skip prob is 1 - max(p**z, this)")
    target_zero_variance: float = Field(0.25, gt=0.0, le=1.0)
    adjust_step: float = Field(0.01, ge=0.0)
    p_min: float = Field(0.05, ge=0.0, le=1.0)
    p_max: float = Field(0.95, ge=0.0, le=1.0)
    adapt_from_epoch: int = Field(1, ge=0, description="adapt p_easy/p_hard once epoch >= this")
    max_draw_factor: float = Field(4.0, ge=0.0, description="replacement candidates examined, x batch size")
    max_trace: int = Field(128, ge=1, description="trace entries kept per prompt (>= 90 is exact for p <= 0.95)")
    batch_filling: Literal["fixed", "adaptive"] = "fixed"
    sampling_batch_factor: float = Field(1.5, ge=1.0, description="adaptive: round-0 prompts / batch size")
    min_sampling_factor: float = Field(0.25, gt=0.0, description="adaptive: smallest round / batch size")
    beta: float = Field(1.25, gt=0.0, description="adaptive: over-sampling factor of the next round")


def _trailing(means: Sequence[float], pred) -> int:
    return sum(1 for _ in takewhile(pred, reversed(means)))


def skip_probability(trace: Sequence, p_easy: float, p_hard: float, easy_threshold: float = 0.98,
                     hard_threshold: float = 0.11, min_keep_prob: float = 0.01) -> float:
    """GRESO's pre-rollout skip probability of one prompt.

    ``trace`` holds (step, mean reward) pairs, oldest first (plain means are accepted too).
    """
    means = [float(e[1]) if isinstance(e, (tuple, list)) else float(e) for e in trace]
    if not means:
        return 0.0
    z_e = _trailing(means, lambda m: m >= easy_threshold)
    if z_e > 0:
        return 1.0 - max(p_easy ** z_e, min_keep_prob)
    if means[-1] <= hard_threshold:
        z_h = _trailing(means, lambda m: m <= hard_threshold)
        return 1.0 - max(p_hard ** z_h, min_keep_prob)
    return 0.0


def next_sampling_size(remaining: int, zero_variance_ratio: float, n: int, default: int,
                       minimum: int, beta: float = 1.25) -> tuple[int, bool]:
    """(prompts of the next round, whether it is the last) in the official trainer's
    arithmetic: ``int(remaining / (1 - zv) / n * beta)`` capped to ``[minimum, default]``;
    an estimate at most ``default`` makes the round the last one. ``remaining`` counts
    trajectories. A round of only zero-variance groups (zv = 1) asks for ``default``."""
    if zero_variance_ratio >= 1.0:
        return max(default, minimum), False
    est = int(remaining / (1 - zero_variance_ratio) / n * beta)
    return max(min(est, default), minimum), est <= default


def _trainable(g: Group) -> bool:
    return g.n == 1 or g.mixed


class GRESO(Method):
    name = "greso"
    Config = GRESOConfig

    def __init__(self, config: GRESOConfig):
        super().__init__(config)
        self.traces: dict[str, list[list]] = {}     # uid -> [[step, mean], ...]
        self.p_easy = float(config.p_easy_init)
        self.p_hard = float(config.p_hard_init)
        self.step = 0
        self.epoch = 0
        self.pool: list[Problem] = []
        self.graph = graph_estimator(config)
        self._rolled: list[Group] | None = None     # adaptive: every group of the step, kept or not

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        self.pool = list(problems)
        if self.graph is not None:
            self.graph.fit_pool(self.pool)

    def skip_prob(self, uid: str) -> float:
        c = self.config
        if self.graph is not None:
            return graph_skip_probability(float(self.graph.predict([uid])[0]), float(self.graph.evidence([uid])[0]),
                                          c.n, self.p_easy, self.p_hard, c.min_keep_prob)
        return skip_probability(self.traces.get(uid, ()), self.p_easy, self.p_hard,
                                c.easy_threshold, c.hard_threshold, c.min_keep_prob)

    def select(self, batch: Sequence[Problem], rng: np.random.Generator) -> tuple[list[Problem], dict[str, float]]:
        """The prompts to roll out: exactly ``len(batch)`` of them (skips replaced, see module doc)."""
        selected, skipped = [], []                   # skipped: (prob, order, problem)

        def keep(p: Problem) -> bool:
            q = self.skip_prob(p.uid)
            if rng.random() < q:
                skipped.append((q, len(skipped), p))
                return False
            selected.append(p)
            return True
        for p in batch:
            keep(p)
        need, drawn, examined = len(batch) - len(selected), 0, 0
        if need > 0 and self.pool:
            taken = {p.uid for p in batch}
            limit = math.ceil(self.config.max_draw_factor * len(batch))
            for i in rng.permutation(len(self.pool)).tolist():
                if need == 0 or examined >= limit:
                    break
                p = self.pool[i]
                if p.uid in taken:
                    continue
                taken.add(p.uid)
                examined += 1
                if keep(p):
                    drawn += 1
                    need -= 1
        forced = sorted(skipped, key=lambda t: (t[0], t[1]))[:need]
        selected.extend(p for _, _, p in forced)
        stats = {"skipped": float(len(skipped) - len(forced)), "drawn": float(drawn),
                 "examined": float(examined), "forced": float(len(forced))}
        return selected, stats

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        self.step = ctx.step
        self.epoch = (ctx.step * len(batch)) // max(len(self.pool), 1)
        if self.config.batch_filling == "adaptive":
            return self._rollout_adaptive(batch, ctx, rng)
        chosen, stats = self.select(batch, rng)
        self.last_stats = {**stats, "p_easy": self.p_easy, "p_hard": self.p_hard}
        return ctx.sample_groups(ctx.prompt_items(chosen), self.config.n)

    def _rollout_adaptive(self, batch: Sequence[Problem], ctx: RolloutContext,
                          rng: np.random.Generator) -> list[Group]:
        c, B = self.config, len(batch)
        default = max(1, math.ceil(c.sampling_batch_factor * B - 1e-9))
        minimum = max(1, math.ceil(c.min_sampling_factor * B - 1e-9))
        taken = {p.uid for p in batch}
        stream = list(batch) + [self.pool[i] for i in rng.permutation(len(self.pool)).tolist()
                                if self.pool[i].uid not in taken]
        pos = skipped = rounds = 0
        size, last = default, False
        kept: list[Group] = []
        rolled: list[Group] = []
        while True:
            chosen: list[Problem] = []
            while len(chosen) < size and pos < len(stream):
                p = stream[pos]
                pos += 1
                if rng.random() < self.skip_prob(p.uid):
                    skipped += 1
                else:
                    chosen.append(p)
            if not chosen:
                break
            groups = ctx.sample_groups(ctx.prompt_items(chosen), c.n, seed_offset=rounds)
            rounds += 1
            rolled += groups
            fresh = [g for g in groups if _trainable(g)]
            kept += fresh
            if len(kept) >= B or last or pos >= len(stream):
                break
            size, last = next_sampling_size((B - len(kept)) * c.n, 1 - len(fresh) / len(groups), c.n,
                                            default, minimum, c.beta)
        out = kept[:B]
        discard(ctx, [g for g in rolled if not _trainable(g)] + kept[B:])
        self._rolled = rolled
        self.last_stats = {"skipped": float(skipped), "examined": float(pos), "gen_rounds": float(rounds),
                           "rollouts": float(sum(g.n for g in rolled)), "kept_groups": float(len(out)),
                           "discarded_groups": float(len(rolled) - len(out)),
                           "p_easy": self.p_easy, "p_hard": self.p_hard}
        return out

    def _adapt(self, p: float, ratio: float, target: float) -> float:
        c = self.config
        p = p - c.adjust_step if ratio >= target else p + c.adjust_step
        return round(min(max(p, c.p_min), c.p_max), 9)

    def observe(self, groups: list[Group]) -> None:
        c = self.config
        if self._rolled is not None:              # adaptive filling: the dropped groups count too
            groups, self._rolled = self._rolled, None
        if self.graph is not None:
            self.graph.observe_groups(groups, self.step)
        easy = hard = total = 0
        for g in groups:
            if g.is_replay or g.supervised or not g.rewards:
                continue
            mean = float(np.mean(g.rewards))
            trace = self.traces.setdefault(g.problem_uid, [])
            trace.append([int(self.step), mean])
            del trace[:-c.max_trace]
            easy += mean >= c.easy_threshold
            hard += mean <= c.hard_threshold
            total += 1
        if total and self.epoch >= c.adapt_from_epoch:
            self.p_easy = self._adapt(self.p_easy, easy / total, c.target_zero_variance / 3)
            self.p_hard = self._adapt(self.p_hard, hard / total, 2 * c.target_zero_variance / 3)

    def rollouts_per_step(self, batch_size: int) -> int:
        """Fixed filling: exactly ``B * n``. Adaptive: round 0's ``S * n`` (see the module doc)."""
        if self.config.batch_filling == "adaptive":
            return math.ceil(self.config.sampling_batch_factor * batch_size - 1e-9) * self.config.n
        return batch_size * self.config.n

    def step_stats(self) -> dict[str, float]:
        return {**self.last_stats, "traced_prompts": float(len(self.traces)), **graph_error(self.graph)}

    def state_dict(self) -> dict[str, Any]:
        return {"traces": {u: [list(e) for e in t] for u, t in self.traces.items()},
                "p_easy": self.p_easy, "p_hard": self.p_hard, "step": self.step, "epoch": self.epoch,
                "last": dict(self.last_stats), **({} if self.graph is None else {"graph": self.graph.state_dict()})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.traces = {u: [[int(s), float(m)] for s, m in t] for u, t in state["traces"].items()}
        self.p_easy, self.p_hard = float(state["p_easy"]), float(state["p_hard"])
        self.step, self.epoch = int(state["step"]), int(state["epoch"])
        self.last_stats = {k: float(v) for k, v in state.get("last", {}).items()}
        if self.graph is not None:
            self.graph.load_state_dict(state["graph"])
