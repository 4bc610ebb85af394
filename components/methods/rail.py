"""RAIL: Recoverability-Aware Intervention Learning (from its abstract; no public
code, docs/methods.md §10: "NF"). Rules, the abstract sentence each comes from, and our
choices ([ours], config knobs of :class:`RAILConfig`):

1. "RAIL models intervention selection as an online contextual-bandit problem." Each prompt
   of the batch is one decision. Arms [ours: the abstract leaves the set open; these are the
   interventions this project already has]:
   - ``fresh``: n samples from the prompt (GRPO);
   - ``replay@c`` for c in ``cut_fractions``: VSR prefix replay, n continuations of the
     first round(c |tau|) tokens of the prompt's most recent successful trajectory (expert
     trace until the policy has one); the prefix is context, never in the loss;
   - ``hint``: n continuations of the first round(``hint_fraction`` |expert|) tokens of the
     expert trace (an expert-prefix hint), context as well;
   - ``skip``: the prompt is not rolled out; a fresh prompt drawn (step rng) from the
     training pool gets its n samples instead, so the budget is kept exactly (B n per step).
   An arm that cannot act (no trajectory, no expert trace, pool exhausted) is masked.
   Context x [ours]: (1, posterior mean pass rate p, 4 p (1 - p), 4 x the Bernoulli variance
   of the prompt's last fresh group, has-history flag, prompt tokens / 256, step / 100), p
   from a Beta(1 + s, 1 + f) over the prompt's fresh outcomes with counts decayed by
   ``count_decay`` per step (p0 from the hard-subset filter seeds s, f as 2 pseudo-rollouts).
2. "learns how to generate rollouts based on the improvement produced by each
   intervention." Reward [ours]: mixed-group yield per generated
   token, r = 1000 [group has mixed rewards] / (tokens generated for the group); a skip is
   credited with its replacement's group.
   Bandit [ours]: disjoint linear Thompson sampling (Bayesian linear regression per arm,
   prior N(0, I / ``ridge``), noise scale ``noise``), with exponential forgetting
   (``forgetting`` per step) because the policy, and so each arm's payoff, drifts. Why
   Thompson and not LinUCB: a batch's decisions are made together with no feedback between
   them, and LinUCB is deterministic given the statistics, so every prompt with a similar
   context gets the same arm in a batch; posterior sampling spreads them. ``bandit: ucb``
   (LinUCB, width ``ucb_alpha``) is there for comparison.
3. "trains a recoverability controller using intervention traces collected through a
   shadow-to-live procedure." For ``shadow_steps`` steps a default policy acts [ours: VSR's
   rule, a ``shadow_rho`` share of prompts replayed at a uniformly drawn cut, the rest
   fresh, and with probability ``shadow_explore`` a uniformly drawn feasible arm instead]
   while the controller learns from its traces (per-arm regression, valid off-policy for a
   well-specified linear model); then the controller acts ("live") and keeps learning from
   its own traces.
"""
from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from components.data.schema import Problem
from components.methods.base import Group, Method, MethodConfig, RolloutContext

DIM = 7


# ---------------------------------------------------------------------------- the bandit
class LinearBandit:
    """Disjoint linear bandit: per arm A = ridge I + sum x x^T, b = sum r x (with forgetting)."""

    def __init__(self, n_arms: int, dim: int, ridge: float = 1.0, noise: float = 1.0,
                 kind: Literal["thompson", "ucb"] = "thompson", ucb_alpha: float = 1.0):
        self.n_arms, self.dim, self.ridge, self.noise = n_arms, dim, ridge, noise
        self.kind, self.ucb_alpha = kind, ucb_alpha
        self.A = np.stack([ridge * np.eye(dim)] * n_arms)
        self.b = np.zeros((n_arms, dim))
        self._post = None

    def posterior(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per arm (mean, covariance A^-1, its Cholesky factor); cached until the next update."""
        if self._post is None:
            self._post = []
            for a in range(self.n_arms):
                cov = np.linalg.inv(self.A[a])
                cov = (cov + cov.T) / 2
                self._post.append((cov @ self.b[a], cov, np.linalg.cholesky(cov)))
        return self._post

    def scores(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Per arm: x.theta with theta = mu + noise L z, z ~ N(0, I) (Thompson), or
        x.mu + alpha sqrt(x^T A^-1 x) (UCB)."""
        out = np.empty(self.n_arms)
        for a, (mu, cov, chol) in enumerate(self.posterior()):
            if self.kind == "ucb":
                out[a] = x @ mu + self.ucb_alpha * np.sqrt(max(x @ cov @ x, 0.0))
            else:
                out[a] = x @ (mu + self.noise * chol @ rng.standard_normal(self.dim))
        return out

    def choose(self, x: np.ndarray, feasible: Sequence[bool], rng: np.random.Generator) -> int:
        s = np.where(np.asarray(feasible, dtype=bool), self.scores(x, rng), -np.inf)
        if not np.isfinite(s).any():
            raise ValueError("LinearBandit.choose: no feasible arm")
        return int(np.argmax(s))

    def update(self, x: np.ndarray, arm: int, reward: float) -> None:
        self.A[arm] += np.outer(x, x)
        self.b[arm] += reward * x
        self._post = None

    def forget(self, gamma: float) -> None:
        """A <- gamma A + (1 - gamma) ridge I, b <- gamma b: old traces fade toward the prior."""
        self.A = gamma * self.A + (1.0 - gamma) * self.ridge * np.eye(self.dim)[None]
        self.b = gamma * self.b
        self._post = None

    def state_dict(self) -> dict[str, Any]:
        return {"A": self.A.tolist(), "b": self.b.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.A, self.b = np.array(state["A"], dtype=float), np.array(state["b"], dtype=float)
        self._post = None


def context(p: float, last_var: float, has_history: bool, prompt_len: int, step: int) -> np.ndarray:
    return np.array([1.0, p, 4.0 * p * (1.0 - p), 4.0 * last_var, float(has_history), prompt_len / 256.0,
                     step / 100.0])


def yield_reward(group: Group) -> float:
    """1000 x [mixed] / generated tokens of the group (0 tokens: 0)."""
    tokens = sum(len(r) for r in group.responses)
    return 1000.0 * float(group.mixed) / tokens if tokens else 0.0


# ---------------------------------------------------------------------------- the method
class RAILConfig(MethodConfig):
    n: int = Field(8, ge=1, description="samples per decision (every arm)")
    cut_fractions: tuple[float, ...] = (0.25, 0.5, 0.75)
    hint_fraction: float = Field(0.5, gt=0.0, lt=1.0)
    bandit: Literal["thompson", "ucb"] = "thompson"
    ridge: float = Field(1.0, gt=0.0)
    noise: float = Field(1.0, gt=0.0, description="Thompson posterior scale")
    ucb_alpha: float = Field(1.0, ge=0.0)
    forgetting: float = Field(0.98, gt=0.0, le=1.0, description="per-step decay of the bandit statistics")
    count_decay: float = Field(0.9, gt=0.0, le=1.0, description="per-step decay of a prompt's pass counts")
    shadow_steps: int = Field(10, ge=0, description="steps the default policy acts while the controller learns")
    shadow_rho: float = Field(0.5, ge=0.0, le=1.0)
    shadow_explore: float = Field(0.2, ge=0.0, le=1.0)
    success_threshold: float = 0.5


class RAIL(Method):
    name = "rail"
    Config = RAILConfig

    def __init__(self, config: RAILConfig):
        super().__init__(config)
        c = config
        self.arms = ["fresh", *[f"replay@{f:g}" for f in c.cut_fractions], "hint", "skip"]
        self.bandit = LinearBandit(len(self.arms), DIM, c.ridge, c.noise, c.bandit, c.ucb_alpha)
        self.counts: dict[str, list[float]] = {}       # uid -> [successes, failures] (decayed)
        self.last_var: dict[str, float] = {}
        self.buffer: dict[str, list[int]] = {}         # uid -> most recent successful response ids
        self.expert: dict[str, list[int]] = {}
        self.pool: dict[str, Problem] = {}
        self.step = 0
        self.pending: dict[str, tuple[list[float], int]] = {}   # group uid -> (x, arm)
        self.eos = None

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        self.pool = {p.uid: p for p in problems}
        tok = resources.get("tokenizer")
        self.eos = eos = getattr(tok, "eos_token_id", None)
        for uid, trace in sorted((resources.get("expert_traces") or {}).items()):
            if uid in self.pool and tok is not None:
                self.expert[uid] = [t for t in tok.encode(trace, add_special_tokens=False) if t != eos]
                self.buffer.setdefault(uid, list(self.expert[uid]))
        for uid, p0 in (resources.get("p0") or {}).items():
            self.counts.setdefault(uid, [2.0 * float(p0), 2.0 * (1.0 - float(p0))])

    # ---- decisions -------------------------------------------------------------------
    def features(self, prob: Problem, prompt_len: int) -> np.ndarray:
        s, f = self.counts.get(prob.uid, (0.0, 0.0))
        p = (1.0 + s) / (2.0 + s + f)
        return context(p, self.last_var.get(prob.uid, 0.0), prob.uid in self.last_var, prompt_len, self.step)

    def feasible(self, uid: str, spare: int) -> list[bool]:
        replay = [uid in self.buffer and 0 < round(f * len(self.buffer[uid])) < len(self.buffer[uid])
                  for f in self.config.cut_fractions]
        e = self.expert.get(uid, [])
        return [True, *replay, 0 < round(self.config.hint_fraction * len(e)) < len(e), spare > 0]

    def default_arm(self, feasible: list[bool], rng: np.random.Generator) -> int:
        c, ok = self.config, np.flatnonzero(feasible)
        if rng.random() < c.shadow_explore:
            return int(rng.choice(ok))
        cuts = [1 + i for i in range(len(c.cut_fractions)) if feasible[1 + i]]
        if cuts and rng.random() < c.shadow_rho:
            return int(rng.choice(cuts))
        return 0

    @property
    def live(self) -> bool:
        return self.step >= self.config.shadow_steps

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        c = self.config
        if ctx.step > self.step:
            self.bandit.forget(c.forgetting ** (ctx.step - self.step))
            for v in self.counts.values():
                v[0] *= c.count_decay ** (ctx.step - self.step)
                v[1] *= c.count_decay ** (ctx.step - self.step)
        self.step = ctx.step
        taken = {p.uid for p in batch}
        spare = [u for u in sorted(self.pool) if u not in taken]
        spare = [spare[i] for i in rng.permutation(len(spare))] if spare else []
        items, self.pending, chosen = [], {}, []
        tok = ctx.engine.tokenizer
        for prob in batch:
            ids = tuple(ctx.encode_prompt(prob))
            x = self.features(prob, len(ids))
            ok = self.feasible(prob.uid, len(spare))
            arm = self.bandit.choose(x, ok, rng) if self.live else self.default_arm(ok, rng)
            chosen.append(arm)
            name = self.arms[arm]
            if name == "fresh":
                item = (prob, ids, "", len(ids), prob.uid)
            elif name == "skip":
                rep = self.pool[spare.pop(0)]
                rids = tuple(ctx.encode_prompt(rep))
                item = (rep, rids, "", len(rids), f"{rep.uid}!for:{prob.uid}")
            else:
                src = self.expert[prob.uid] if name == "hint" else self.buffer[prob.uid]
                frac = c.hint_fraction if name == "hint" else c.cut_fractions[arm - 1]
                cut = int(round(frac * len(src)))
                prefix = src[:cut]
                item = (prob, ids + tuple(prefix), tok.decode(prefix, skip_special_tokens=True), len(ids),
                        f"{prob.uid}@{name}")
            items.append(item)
            self.pending[item[4]] = (x.tolist(), arm)
        groups = ctx.sample_groups(items, c.n)
        for g in groups:
            g.meta["rail_arm"] = self.arms[self.pending[g.uid][1]]
        counts = np.bincount(chosen, minlength=len(self.arms))
        # metric names: MLflow refuses '@' (the replay arms' names), so it is spelled "_at_" there
        self.last_stats = {"live": float(self.live),
                           **{f"arm_{a.replace('@', '_at_')}": float(k) for a, k in zip(self.arms, counts)}}
        return groups

    def observe(self, groups: list[Group]) -> None:
        rewards = []
        for g in groups:
            if g.uid in self.pending:
                x, arm = self.pending.pop(g.uid)
                r = yield_reward(g)
                self.bandit.update(np.array(x), arm, r)
                rewards.append(r)
            if g.supervised or not g.rewards:
                continue
            wins = [i for i, r in enumerate(g.rewards) if r > self.config.success_threshold]
            if wins:   # the most recent success (prefix + continuation) becomes the prompt's trajectory
                self.buffer[g.problem_uid] = g.trajectory(wins[-1], self.eos)
            if not g.is_replay:
                v = self.counts.setdefault(g.problem_uid, [0.0, 0.0])
                v[0] += len(wins)
                v[1] += g.n - len(wins)
                p = len(wins) / g.n
                self.last_var[g.problem_uid] = p * (1.0 - p)
        if rewards:
            self.last_stats["reward_mean"] = float(np.mean(rewards))

    def rollouts_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.n

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "bandit": self.bandit.state_dict(), "counts": self.counts,
                "last_var": self.last_var, "buffer": self.buffer, "expert": self.expert}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.bandit.load_state_dict(state["bandit"])
        self.counts = {u: [float(a), float(b)] for u, (a, b) in state["counts"].items()}
        self.last_var = {u: float(v) for u, v in state["last_var"].items()}
        self.buffer = {u: [int(t) for t in v] for u, v in state["buffer"].items()}
        self.expert = {u: [int(t) for t in v] for u, v in state["expert"].items()}
