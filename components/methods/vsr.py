"""VSR: Variance-optimal State Resampling (the paper this project reproduces:
"Variance-Optimal State Resampling for Reinforcement Learning with Verifiable Rewards";
docs/methods.md §4), on every task: a trajectory is a response's token ids after the prompt
(math) or an episode's actions from reset (agentic), and a replay state is a cut of it (a
token prefix, or a turn prefix the environment replays); the rollout context of the task
turns a cut into a start state (``RolloutContext`` / ``EpisodeContext.replay_item``).

A recency-windowed buffer holds the most recent *successful* trajectory of each prompt or map
seed (expert traces seed it at cold start). Its prefix states s_i = (x, y_<i) are scored

    p_hat(s_i) = (1 - alpha_i) * p0(x) + alpha_i * R(tau),   alpha_i = i / |tau|,
    sigma_hat  = sqrt(p_hat * (1 - p_hat))

with R(tau) = 1 (only successes are stored) and p0(x) the success rate of the latest
group rolled out from the original prompt. Each step a fraction ``rho`` of the batch's
elements are replayed prefixes, drawn with probability proportional to sigma_hat; each
gets a fresh group of ``n`` continuations, the prefix being context (never in the loss).
The rest are the batch's fresh prompts. ``rho = 0`` issues exactly GRPO's requests, so it
reproduces GRPO bit for bit.

The paper's rules are the defaults (seed 000, Section 3 and Appendix C):
- token-level states: every position i of a stored trajectory is a state s_i = (x, y_<i)
  (``cut_points: every``; on episodes every turn prefix);
- draws proportional to sigma_hat, independently, so with replacement (``replacement``);
- only successful *fresh* trajectories enter the buffer, the most recent one per prompt;
  replayed continuations do not (``insert_from_replay: false``), so recency eviction is
  what replaces the expert seeds.
Choices the paper leaves open, or alternatives to its rules, as knobs (docs/methods.md):
- ``cut_stride``: with ``every``, only every stride-th position (a dense grid);
  ``cut_points: fractions`` at ``cut_fractions`` of the length (0.25/0.5/0.75: the
  positions of the paper's Appendix D.5 validation), or ``steps`` (after each reasoning
  step delimiter);
- ``replacement: false`` draws distinct states;
- ``insert_from_replay: true`` also stores the successes of replayed continuations
  (prefix + continuation);
- recency: ``window_steps`` (a trajectory older than this many steps is evicted; ``None``
  keeps it until replaced) and ``capacity`` (oldest evicted first);
- ``rho`` default 0.5; ``p0`` of a prompt never rolled out = its pass rate in the
  hard-subset filter (``p0_default`` when unknown).
The paper's ablations are this class with other defaults, registered as presets
(``components.methods.registry``): ``scoring: uniform`` (w/o scoring), ``freeze_after``
(w/o recency), ``online_insert: false`` (static expert-prefix resets).

Capacity eviction drops the oldest ``inserted_step`` first and breaks ties by key: the choice
then depends on the buffer's content only, not on the order the step's groups were observed
in, so a run restored from its state dict evicts what the uninterrupted run did.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from itertools import takewhile
from typing import Any, Callable, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from components.data.schema import Problem
from components.methods.base import Group, Method, MethodConfig, RolloutContext


class VSRConfig(MethodConfig):
    n: int = Field(8, ge=1, description="continuations per replayed prefix / samples per fresh prompt")
    rho: float = Field(0.5, ge=0.0, le=1.0, description="fraction of batch elements drawn from the buffer")
    cut_points: Literal["fractions", "steps", "every"] = "every"
    cut_stride: int = Field(1, ge=1, description="with cut_points: every, every stride-th position")
    cut_fractions: tuple[float, ...] = (0.25, 0.5, 0.75)
    step_delimiters: tuple[str, ...] = (". ", "\n")
    window_steps: int | None = Field(40, ge=1, description="recency window in training steps")
    capacity: int = Field(100_000, ge=1, description="max trajectories kept (oldest evicted)")
    scoring: Literal["sigma", "uniform"] = "sigma"
    replacement: bool = True
    online_insert: bool = True
    insert_from_replay: bool = False
    freeze_after: int | None = Field(None, ge=0, description="stop inserting/evicting after this step")
    expert_seed: bool = True          # the paper's math cold start; off on episodes
    p0_default: float = Field(0.0, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _cut_knobs_of_the_cut_rule(self):
        # a knob of another cut rule would be ignored without a word
        if "cut_fractions" in self.model_fields_set and self.cut_points != "fractions":
            raise ValueError(f"cut_fractions applies to cut_points: fractions (cut_points is {self.cut_points!r})")
        if "cut_stride" in self.model_fields_set and self.cut_points != "every":
            raise ValueError(f"cut_stride applies to cut_points: every (cut_points is {self.cut_points!r})")
        return self


@dataclass
class Trajectory:
    problem_uid: Any              # the item's key: a problem uid or a map seed
    response_ids: list            # the successful response's ids (EOS stripped) or the episode's actions
    inserted_step: int
    source: str                   # "expert" | "policy"


def sigma_hat(p0: float, alpha: float, reward: float = 1.0) -> float:
    p = (1.0 - alpha) * p0 + alpha * reward
    return math.sqrt(max(p * (1.0 - p), 0.0))


class VSR(Method):
    name = "vsr"
    Config = VSRConfig

    def __init__(self, config: VSRConfig):
        super().__init__(config)
        self.buffer: dict[Any, Trajectory] = {}   # most recent successful trajectory per item
        self.p0: dict[Any, float] = {}
        self.step = 0
        self.problems: dict[Any, Any] = {}
        self.tokenizer = None
        self.key: Callable[[Any], Any] = str

    # ---- setup -----------------------------------------------------------------------
    def setup(self, problems: Sequence[Any], resources: dict[str, Any]) -> None:
        """``problems``: Problems (keyed by uid) or map seeds (keyed by the int); an expert
        trace is a text (tokenised here) or a list of actions."""
        self.key = str if isinstance(problems[0], Problem) else int
        self.problems = {(p.uid if isinstance(p, Problem) else int(p)): p for p in problems}
        self.tokenizer = resources.get("tokenizer")
        for uid, rate in (resources.get("p0") or {}).items():
            self.p0.setdefault(self.key(uid), float(rate))
        if self.config.expert_seed and not self.buffer:
            eos = getattr(self.tokenizer, "eos_token_id", None)
            traces = {self.key(k): v for k, v in (resources.get("expert_traces") or {}).items()}
            for uid, trace in sorted(traces.items()):
                if uid not in self.problems:
                    continue
                ids = (list(trace) if not isinstance(trace, str) else
                       [t for t in self.tokenizer.encode(trace, add_special_tokens=False) if t != eos])
                if ids:
                    self.buffer[uid] = Trajectory(uid, ids, 0, "expert")

    # ---- prefix states ---------------------------------------------------------------
    def cut_positions(self, traj: Trajectory) -> list[int]:
        L = len(traj.response_ids)
        if self.config.cut_points == "fractions":
            cuts = {int(round(f * L)) for f in self.config.cut_fractions}
        elif self.config.cut_points == "every":
            cuts = set(range(self.config.cut_stride, L, self.config.cut_stride))
        else:
            cuts, text = set(), ""
            for i, t in enumerate(traj.response_ids[:-1], 1):
                text += self.tokenizer.decode([t])
                if text.endswith(self.config.step_delimiters):
                    cuts.add(i)
        return sorted(c for c in cuts if 0 < c < L)

    def _state_arrays(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Every replayable state, vectorised: (uids in sorted order, trajectory index per
        state, cut position per state, score per state), ordered by (uid, cut). With
        ``cut_points: fractions`` or ``every`` the cuts of a trajectory depend on its length
        only, so a 1M-state buffer is scored with array ops; the per-state values equal the
        scalar ``cut_positions`` / ``sigma_hat`` ones exactly (same float operations)."""
        uids = sorted(self.buffer)
        lengths = np.fromiter((len(self.buffer[u].response_ids) for u in uids), dtype=np.int64, count=len(uids))
        if self.config.cut_points == "every":
            s = self.config.cut_stride
            counts = np.maximum(lengths - 1, 0) // s                          # positions s, 2s, ... < L
            traj = np.repeat(np.arange(len(uids), dtype=np.int64), counts)
            first = np.repeat(np.cumsum(counts) - counts, counts)
            cut = (np.arange(int(counts.sum()), dtype=np.int64) - first + 1) * s
        elif self.config.cut_points == "steps":
            rows = [(t, c) for t, uid in enumerate(uids) for c in self.cut_positions(self.buffer[uid])]
            traj = np.array([r[0] for r in rows], dtype=np.int64)
            cut = np.array([r[1] for r in rows], dtype=np.int64)
        else:
            fr = np.array(sorted(set(self.config.cut_fractions)), dtype=float)
            cuts = np.rint(np.outer(lengths, fr)).astype(np.int64)          # == int(round(f * L))
            ok = (cuts > 0) & (cuts < lengths[:, None])
            ok[:, 1:] &= cuts[:, 1:] != cuts[:, :-1]                          # set(): drop repeated cuts
            traj, col = np.nonzero(ok)                                        # row-major: (uid, cut) order
            cut = cuts[traj, col]
        L = lengths[traj]
        if self.config.scoring == "uniform":
            score = np.ones(len(cut))
        else:
            p0 = np.fromiter((self.p0.get(u, self.config.p0_default) for u in uids), dtype=float, count=len(uids))
            alpha = cut / L
            p = (1.0 - alpha) * p0[traj] + alpha * 1.0
            score = np.sqrt(np.maximum(p * (1.0 - p), 0.0))
        return uids, traj, cut, score

    def prefix_states(self) -> list[tuple[str, int, float]]:
        """All replayable states as (problem uid, cut position, score)."""
        uids, traj, cut, score = self._state_arrays()
        return [(uids[t], int(c), float(w)) for t, c, w in zip(traj.tolist(), cut.tolist(), score.tolist())]

    def select_replays(self, k: int, rng: np.random.Generator) -> list[tuple[str, int, float]]:
        if k <= 0 or not self.buffer:
            return []
        uids, traj, cut, w = self._state_arrays()
        if len(cut) == 0:
            return []
        p = w / w.sum() if w.sum() > 0 else np.full(len(cut), 1.0 / len(cut))
        if self.config.replacement:
            idx = rng.choice(len(cut), size=k, replace=True, p=p)
        else:
            k = min(k, len(cut))
            idx = rng.choice(len(cut), size=k, replace=False, p=p) if k < len(cut) else np.arange(k)
        return [(uids[int(traj[i])], int(cut[i]), float(w[i])) for i in sorted(idx.tolist())]

    def plan_step(self, batch: Sequence[Problem], ctx: RolloutContext,
                  rng: np.random.Generator) -> tuple[list, list[tuple[str, int, float]]]:
        """The step's fresh items (the batch's first B - k) and its k = rho * B replays."""
        self.step = ctx.step
        self._evict()
        k = int(round(self.config.rho * len(batch)))
        replays = self.select_replays(k, rng) if k > 0 else []
        return ctx.prompt_items(list(batch)[: len(batch) - len(replays)]), replays

    # ---- protocol --------------------------------------------------------------------
    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        items, replays = self.plan_step(batch, ctx, rng)
        items += [ctx.replay_item(self.problems[uid], self.buffer[uid].response_ids, cut) for uid, cut, _ in replays]
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
            # the most recent success replaces the item's trajectory
            traj = g.trajectory(wins[-1], eos)
            if traj:
                # re-inserted at the end: the dict stays ordered by inserted_step (see _evict)
                self.buffer.pop(g.problem_uid, None)
                self.buffer[g.problem_uid] = Trajectory(g.problem_uid, traj, self.step, "policy")
        if not frozen:
            self._evict()

    def _evict(self) -> None:
        if self.config.freeze_after is not None and self.step >= self.config.freeze_after:
            return
        if not self.config.online_insert:
            return   # a static pool never changes
        # The dict is ordered by inserted_step (inserts happen at the current step, replaced
        # entries move to the end), so the oldest entries are at the front: both rules touch
        # only what they evict, not the whole buffer.
        w = self.config.window_steps
        if w is not None:
            for uid in list(takewhile(lambda u: self.step - self.buffer[u].inserted_step >= w, self.buffer)):
                del self.buffer[uid]
        excess = len(self.buffer) - self.config.capacity
        if excess > 0:
            # oldest first, ties by uid: take the front entries through the last tied step
            front = []
            for uid, t in self.buffer.items():
                if len(front) >= excess and t.inserted_step > front[-1][0]:
                    break
                front.append((t.inserted_step, uid))
            for _, uid in sorted(front)[:excess]:
                del self.buffer[uid]

    def rollouts_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.n

    def step_stats(self) -> dict[str, float]:
        src = [t.source for t in self.buffer.values()]
        return {"buffer_trajectories": len(src), "buffer_expert": src.count("expert"),
                "buffer_policy": src.count("policy")}

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": {u: asdict(t) for u, t in self.buffer.items()}, "p0": dict(self.p0),
                "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        trajs = [Trajectory(**t) for t in state["buffer"].values()]
        # ordered by inserted_step (stable), the invariant _evict relies on
        self.buffer = {t.problem_uid: t for t in sorted(trajs, key=lambda t: t.inserted_step)}
        self.p0 = {self.key(u): float(v) for u, v in state["p0"].items()}
        self.step = int(state["step"])

