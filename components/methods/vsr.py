"""VSR: Variance-optimal State Resampling (seed ``000_61b9682023dfd83a``, the main paper).

A recency-windowed buffer holds the most recent *successful* trajectory of each prompt
(expert traces seed it at cold start). Its prefix states s_i = (x, y_<i) are scored

    p_hat(s_i) = (1 - alpha_i) * p0(x) + alpha_i * R(tau),   alpha_i = i / |tau|,
    sigma_hat  = sqrt(p_hat * (1 - p_hat))

with R(tau) = 1 (only successes are stored) and p0(x) the success rate of the latest
group rolled out from the original prompt. Each step a fraction ``rho`` of the batch's
elements are replayed prefixes, drawn without replacement with probability proportional
to sigma_hat; each gets a fresh group of ``n`` continuations, the prefix being context
(never in the loss). The rest are the batch's fresh prompts. ``rho = 0`` issues exactly
GRPO's requests, so it reproduces GRPO bit for bit.

Choices the seed leaves open, as config knobs (defaults are ours, marked [INF] in
METHODS.md):
- cut points: ``cut_fractions`` of the trajectory's token length (default 0.25/0.5/0.75),
  or ``cut_points: steps`` (after each reasoning step delimiter);
- recency: ``window_steps`` (a trajectory older than this many steps is evicted; ``None``
  keeps it until replaced) and ``capacity`` (oldest evicted first);
- ``rho`` default 0.5; ``p0`` of a prompt never rolled out = its pass rate in the
  hard-subset filter (``p0_default`` when unknown);
- whether successes of replayed continuations (prefix + continuation) enter the buffer
  (``insert_from_replay``, default true: the seed inserts every successful trajectory).
Ablations (issue 3) are the same class: ``scoring: uniform`` (w/o scoring),
``freeze_after`` (w/o recency), ``online_insert: false`` (static expert-prefix resets).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from components.data.schema import Problem
from components.methods.base import Group, MethodConfig, RolloutContext


class VSRConfig(MethodConfig):
    n: int = Field(8, ge=1, description="continuations per replayed prefix / samples per fresh prompt")
    rho: float = Field(0.5, ge=0.0, le=1.0, description="fraction of batch elements drawn from the buffer")
    cut_points: Literal["fractions", "steps"] = "fractions"
    cut_fractions: tuple[float, ...] = (0.25, 0.5, 0.75)
    step_delimiters: tuple[str, ...] = (". ", "\n")
    window_steps: int | None = Field(40, ge=1, description="recency window in training steps")
    capacity: int = Field(100_000, ge=1, description="max trajectories kept (oldest evicted)")
    scoring: Literal["sigma", "uniform"] = "sigma"
    online_insert: bool = True
    insert_from_replay: bool = True
    freeze_after: int | None = Field(None, ge=0, description="stop inserting/evicting after this step")
    expert_seed: bool = True
    p0_default: float = Field(0.0, ge=0.0, le=1.0)


@dataclass
class Trajectory:
    problem_uid: str
    response_ids: list[int]       # successful response, EOS stripped
    inserted_step: int
    source: str                   # "expert" | "policy"


def sigma_hat(p0: float, alpha: float, reward: float = 1.0) -> float:
    p = (1.0 - alpha) * p0 + alpha * reward
    return math.sqrt(max(p * (1.0 - p), 0.0))


class VSR:
    name = "vsr"
    Config = VSRConfig

    def __init__(self, config: VSRConfig):
        self.config = config
        self.buffer: dict[str, Trajectory] = {}   # most recent successful trajectory per prompt
        self.p0: dict[str, float] = {}
        self.step = 0
        self.problems: dict[str, Problem] = {}
        self.tokenizer = None

    # ---- setup -----------------------------------------------------------------------
    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        self.problems = {p.uid: p for p in problems}
        self.tokenizer = resources.get("tokenizer")
        for uid, rate in (resources.get("p0") or {}).items():
            self.p0.setdefault(uid, float(rate))
        if self.config.expert_seed and not self.buffer:
            eos = getattr(self.tokenizer, "eos_token_id", None)
            for uid, trace in sorted((resources.get("expert_traces") or {}).items()):
                if uid not in self.problems:
                    continue
                ids = [t for t in self.tokenizer.encode(trace, add_special_tokens=False) if t != eos]
                self.buffer[uid] = Trajectory(uid, ids, 0, "expert")

    # ---- prefix states ---------------------------------------------------------------
    def cut_positions(self, traj: Trajectory) -> list[int]:
        L = len(traj.response_ids)
        if self.config.cut_points == "fractions":
            cuts = {int(round(f * L)) for f in self.config.cut_fractions}
        else:
            cuts, text = set(), ""
            for i, t in enumerate(traj.response_ids[:-1], 1):
                text += self.tokenizer.decode([t])
                if text.endswith(self.config.step_delimiters):
                    cuts.add(i)
        return sorted(c for c in cuts if 0 < c < L)

    def prefix_states(self) -> list[tuple[str, int, float]]:
        """All replayable states as (problem uid, cut position, score)."""
        states = []
        for uid in sorted(self.buffer):
            traj = self.buffer[uid]
            p0 = self.p0.get(uid, self.config.p0_default)
            L = len(traj.response_ids)
            for i in self.cut_positions(traj):
                score = 1.0 if self.config.scoring == "uniform" else sigma_hat(p0, i / L)
                states.append((uid, i, score))
        return states

    def select_replays(self, k: int, rng: np.random.Generator) -> list[tuple[str, int, float]]:
        states = self.prefix_states()
        if k <= 0 or not states:
            return []
        k = min(k, len(states))
        w = np.array([s[2] for s in states], dtype=float)
        p = w / w.sum() if w.sum() > 0 else np.full(len(states), 1.0 / len(states))
        idx = rng.choice(len(states), size=k, replace=False, p=p) if k < len(states) else np.arange(k)
        return [states[i] for i in sorted(idx.tolist())]

    # ---- protocol --------------------------------------------------------------------
    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        self.step = ctx.step
        self._evict()
        k = int(round(self.config.rho * len(batch)))
        replays = self.select_replays(k, rng) if k > 0 else []
        fresh = list(batch)[: len(batch) - len(replays)]
        items = ctx.prompt_items(fresh)
        for uid, cut, _ in replays:
            prob = self.problems[uid]
            prompt_ids = ctx.encode_prompt(prob)
            prefix = self.buffer[uid].response_ids[:cut]
            prefix_text = ctx.engine.tokenizer.decode(prefix, skip_special_tokens=True)
            items.append((prob, tuple(prompt_ids) + tuple(prefix), prefix_text, len(prompt_ids), f"{uid}@{cut}"))
        groups = ctx.sample_groups(items, self.config.n)
        for g in groups:
            if g.is_replay:
                traj = self.buffer[g.problem_uid]
                g.meta.update(alpha=g.prefix_len / len(traj.response_ids), source=traj.source)
        return groups

    def observe(self, groups: list[Group]) -> None:
        frozen = self.config.freeze_after is not None and self.step >= self.config.freeze_after
        eos = getattr(self.tokenizer, "eos_token_id", None)
        for g in groups:
            if not g.is_replay and g.rewards:
                self.p0[g.problem_uid] = float(np.mean(g.rewards))
            if frozen or not self.config.online_insert or (g.is_replay and not self.config.insert_from_replay):
                continue
            wins = [i for i, r in enumerate(g.rewards) if r > 0.5]
            if not wins:
                continue
            # the most recent success replaces the prompt's trajectory
            resp = [t for t in g.responses[wins[-1]] if t != eos]
            prefix = list(g.context_ids[g.prompt_len:])
            if prefix + resp:
                self.buffer[g.problem_uid] = Trajectory(g.problem_uid, prefix + resp, self.step, "policy")
        if not frozen:
            self._evict()

    def _evict(self) -> None:
        if self.config.freeze_after is not None and self.step >= self.config.freeze_after:
            return
        if not self.config.online_insert:
            return   # a static pool never changes
        w = self.config.window_steps
        if w is not None:
            for uid in [u for u, t in self.buffer.items() if self.step - t.inserted_step >= w]:
                del self.buffer[uid]
        if len(self.buffer) > self.config.capacity:
            order = sorted(self.buffer, key=lambda u: (self.buffer[u].inserted_step, u))
            for uid in order[: len(self.buffer) - self.config.capacity]:
                del self.buffer[uid]

    def rollouts_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.n

    def buffer_stats(self) -> dict[str, float]:
        src = [t.source for t in self.buffer.values()]
        return {"buffer_trajectories": len(src), "buffer_expert": src.count("expert"),
                "buffer_policy": src.count("policy")}

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": {u: asdict(t) for u, t in self.buffer.items()}, "p0": dict(self.p0),
                "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer = {u: Trajectory(**t) for u, t in state["buffer"].items()}
        self.p0 = {u: float(v) for u, v in state["p0"].items()}
        self.step = int(state["step"])


# ---- the ablations and controls of the VSR paper, as registered presets ------------------
class VSRNoScoringConfig(VSRConfig):
    scoring: Literal["sigma", "uniform"] = "uniform"


class VSRNoScoring(VSR):
    """VSR w/o scoring: same buffer, prefixes drawn uniformly (seed 000, Figure 6)."""
    name = "vsr_no_scoring"
    Config = VSRNoScoringConfig


class VSRNoRecencyConfig(VSRConfig):
    freeze_after: int | None = Field(10, ge=0, description="warm-up steps, then the buffer is frozen")


class VSRNoRecency(VSR):
    """VSR w/o recency: the buffer fills during a warm-up and is then held fixed."""
    name = "vsr_no_recency"
    Config = VSRNoRecencyConfig


class StaticPrefixConfig(VSRConfig):
    scoring: Literal["sigma", "uniform"] = "uniform"
    online_insert: bool = False
    window_steps: int | None = None


class StaticPrefix(VSR):
    """Static uniform expert-prefix resets: a fixed expert-prefix pool, sampled uniformly,
    never updated with the policy's own prefixes (the VSR paper's Llama-3.2-3B control)."""
    name = "static_prefix"
    Config = StaticPrefixConfig
