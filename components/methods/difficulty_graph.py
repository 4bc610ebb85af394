"""Graph-based online difficulty estimator (Liu et al., arXiv 2608.17941; from its
abstract; no public code, equations not published: docs/methods.md §10). An *estimator*,
not a scheduler: VIP, VIGOR and GRESO use it in place of their own difficulty estimates
with ``difficulty: graph`` in their config.

Rules and the abstract sentence each comes from ([ours] = a choice the abstract leaves open,
a config knob of :class:`GraphDifficultyConfig`):

1. "we first construct a difficulty-aware sample graph based on semantic and reasoning
   similarities." :func:`build_graph`: similarity
   s_ij = (1 - rho) cos(e_i, e_j) + rho exp(-|r_i - r_j|^2 / 2 h_r^2), with e the MiniLM
   prompt embedding VIP uses (same embedders, ``components.methods.vip``) and r the
   *reasoning signature* [ours] of :func:`reasoning_signature`: log-counts of the solution's
   steps, operators and numbers, read from the problem's reference solution (expert trace)
   when it has one, else from the prompt; h_r by the median heuristic. Each node keeps its
   ``k_neighbors`` most similar nodes [ours: k = 10], edge weight max(s_ij, 0), symmetrised
   W = max(W, W^T) [ours]; ``reasoning_weight`` rho = 0.5 [ours].
2. "we introduce latent difficulty states and use a Potts prior to encourage neighboring
   samples to share the same state." z_i in {1..K}, p(z) ∝ exp(J sum_{i~j} W_ij [z_i = z_j])
   prod_i pi_{z_i}; K = ``n_states`` = 10, J = ``coupling`` = 1, pi uniform [ours].
3. "We then employ a state-level Beta-Binomial model to aggregate the rollout outcomes
   associated with each state." theta_k ~ Beta(a_k, b_k) (prior means (k + 1/2)/K, strength
   ``prior_strength`` = 10 [ours]: the ordered means also fix the state labels); the
   successes s_i of n_i rollouts of prompt i are Binomial(n_i, theta_{z_i}).
4. "we use an online mean-field variational algorithm to continuously update the
   latent-state assignments and state-level difficulty as new feedback arrives."
   q(z_i) = Cat(phi_i), q(theta_k) = Beta(alpha_k, beta_k), :func:`mean_field_phi` /
   :func:`mean_field_theta`:
       phi_ik ∝ exp(log pi_k + J sum_j W_ij phi_jk + s_i E[log theta_k] + f_i E[log(1 - theta_k)])
       alpha_k = a_k + sum_i phi_ik s_i,   beta_k = b_k + sum_i phi_ik f_i      (f = n - s).
   Online [ours]: when a batch's outcomes arrive, every count decays by ``decay`` per
   elapsed step (the policy moves: old outcomes count less), the batch's counts are added,
   and ``sweeps`` damped (``damping``) parallel updates run over the batch's nodes and their
   neighbours, each followed by the theta update over every node with counts.

Prediction [ours]: a queried node's phi is refreshed from its neighbours (one coordinate
update, not stored), and p_hat_i = sum_k phi_ik (kappa m_k + s_i) / (kappa + n_i), m_k =
E[theta_k]: within its state a prompt's own counts refine the state's rate with
``own_evidence`` kappa = 4 pseudo-rollouts (``None``: the state rate alone). A prompt with no
outcome anywhere near it gets the prior mixture (0.5 with the defaults).

Defaults: K = 10, prior strength 10, rho = 0.5, kappa = 4 were picked among a handful of
settings on a simulated training run; ``decay`` 0.9, ``sweeps`` 3, ``damping`` 0.5, k = 10 were
not tuned.
"""
from __future__ import annotations

import math
import re
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy import sparse
from scipy.special import digamma

from components.data.schema import Problem
from components.methods.base import MethodConfig, fresh_outcomes
from components.methods.embeddings import HashingEmbedder, MiniLMEmbedder, median_bandwidth


class GraphDifficultyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    k_neighbors: int = Field(10, ge=1)
    reasoning_weight: float = Field(0.5, ge=0.0, le=1.0, description="rho: weight of reasoning similarity")
    reasoning_source: Literal["trace", "prompt"] = "trace"
    n_states: int = Field(10, ge=2)
    prior_strength: float = Field(10.0, gt=0.0, description="a_k + b_k of each state's Beta prior")
    coupling: float = Field(1.0, ge=0.0, description="Potts J")
    decay: float = Field(0.9, gt=0.0, le=1.0, description="count forgetting per elapsed step")
    sweeps: int = Field(3, ge=1)
    damping: float = Field(0.5, gt=0.0, le=1.0, description="phi <- (1-d) phi + d phi_new")
    own_evidence: float | None = Field(4.0, gt=0.0, description="kappa; None = state rate only")
    embedder: Literal["minilm", "hashing"] = "minilm"
    success_threshold: float = 0.5


# ---------------------------------------------------------------------------- the graph
_OPS = ("+", "-", "*", "/", "^", "=", "(", "\\frac", "\\sqrt", "<", ">")
_NUM = re.compile(r"\d+(?:\.\d+)?")


def reasoning_signature(text: str) -> np.ndarray:
    """log(1 + count) of: steps ('. ', newlines, '='), each operator in ``_OPS``, numbers, words/10."""
    steps = text.count(". ") + text.count("\n") + text.count("=")
    ops = [text.count(o) for o in _OPS]
    return np.log1p(np.array([steps, *ops, len(_NUM.findall(text)), len(text.split()) / 10.0], dtype=float))


def reasoning_text(p: Problem, source: str) -> str:
    return p.traces[0] if source == "trace" and p.traces else p.prompt


def build_graph(E: np.ndarray, R: np.ndarray, k: int, rho: float, chunk: int = 512) -> sparse.csr_matrix:
    """Symmetric k-NN graph W (CSR, zero diagonal) over rows of E (unit-norm embeddings) and
    R (reasoning signatures): s = (1-rho) cos + rho RBF(R, median h); top-k per row, max(s, 0)."""
    E = np.asarray(E, dtype=float)
    R = np.asarray(R, dtype=float)
    N = len(E)
    if N != len(R):
        raise ValueError(f"build_graph: {N} embeddings but {len(R)} reasoning signatures")
    k = min(k, N - 1)
    if k <= 0:
        return sparse.csr_matrix((N, N))
    En = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    h = median_bandwidth(R) if rho > 0 else 1.0
    sq = (R * R).sum(1)
    rows, cols, vals = [], [], []
    for i0 in range(0, N, chunk):
        i1 = min(N, i0 + chunk)
        s = (1.0 - rho) * (En[i0:i1] @ En.T)
        if rho > 0:
            d2 = np.maximum(sq[i0:i1, None] + sq[None, :] - 2.0 * R[i0:i1] @ R.T, 0.0)
            s += rho * np.exp(-d2 / (2.0 * h * h))
        s[np.arange(i1 - i0), np.arange(i0, i1)] = -np.inf
        # top-k by similarity, ties to the lower index (stable sort of -s)
        nn = np.argsort(-s, axis=1, kind="stable")[:, :k]
        rows.append(np.repeat(np.arange(i0, i1), k))
        cols.append(nn.ravel())
        vals.append(np.maximum(np.take_along_axis(s, nn, 1).ravel(), 0.0))
    W = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(N, N))
    W = W.maximum(W.T).tocsr()
    W.eliminate_zeros()
    return W


# ---------------------------------------------------------------------------- mean field
def state_prior(n_states: int, strength: float) -> tuple[np.ndarray, np.ndarray]:
    m = (np.arange(n_states) + 0.5) / n_states
    return strength * m, strength * (1.0 - m)


def mean_field_theta(phi: np.ndarray, s: np.ndarray, f: np.ndarray, a: np.ndarray, b: np.ndarray):
    """alpha_k = a_k + sum_i phi_ik s_i, beta_k = b_k + sum_i phi_ik f_i."""
    return a + phi.T @ s, b + phi.T @ f


def mean_field_phi(rows: np.ndarray, phi: np.ndarray, W: sparse.csr_matrix, s: np.ndarray, f: np.ndarray,
                   alpha: np.ndarray, beta: np.ndarray, coupling: float, log_pi: np.ndarray) -> np.ndarray:
    """The coordinate update of q(z_i) for ``rows`` (returned, not stored)."""
    el, el1 = digamma(alpha) - digamma(alpha + beta), digamma(beta) - digamma(alpha + beta)
    logits = (log_pi[None, :] + coupling * (W[rows] @ phi) + s[rows, None] * el[None, :]
              + f[rows, None] * el1[None, :])
    logits -= logits.max(1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(1, keepdims=True)


class GraphDifficulty:
    """Online estimator over a fixed prompt pool (``fit_pool`` once, then predict / observe)."""

    def __init__(self, config: GraphDifficultyConfig | None = None, embedder=None):
        self.config = c = config or GraphDifficultyConfig()
        self._embedder = embedder
        self.a, self.b = state_prior(c.n_states, c.prior_strength)
        self.log_pi = np.full(c.n_states, -math.log(c.n_states))
        self.row: dict[str, int] = {}
        self.W = sparse.csr_matrix((0, 0))
        self.phi = np.zeros((0, c.n_states))
        self.s = np.zeros(0)
        self.f = np.zeros(0)
        self.alpha, self.beta = self.a.copy(), self.b.copy()
        self.step = 0
        self._pending: dict[str, list[float]] = {}   # node beliefs loaded before fit_pool
        self.last_error: dict[str, float] = {}       # prediction_error of the last observed batch

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = MiniLMEmbedder() if self.config.embedder == "minilm" else HashingEmbedder()
        return self._embedder

    def fit_pool(self, problems: Sequence[Problem], E: np.ndarray | None = None) -> None:
        """Build the graph over the pool (first of repeated uids kept); ``E`` = embeddings of
        ``problems`` (row per problem) if known."""
        problems = list(problems)
        keep = sorted({p.uid: i for i, p in reversed(list(enumerate(problems)))}.values())   # first of each uid
        pool = [problems[i] for i in keep]
        if not pool:
            raise ValueError("GraphDifficulty.fit_pool: empty prompt pool")
        E = self.embedder.embed([p.prompt for p in pool]) if E is None else np.asarray(E, dtype=float)[keep]
        R = np.stack([reasoning_signature(reasoning_text(p, self.config.reasoning_source)) for p in pool])
        self.row = {p.uid: i for i, p in enumerate(pool)}
        self.W = build_graph(E, R, self.config.k_neighbors, self.config.reasoning_weight)
        N, K = len(pool), self.config.n_states
        self.phi = np.full((N, K), 1.0 / K)
        self.s, self.f = np.zeros(N), np.zeros(N)
        if self._pending:
            self._apply_pending()
        else:
            self.alpha, self.beta = self.a.copy(), self.b.copy()

    def _rows(self, uids: Sequence[str]) -> np.ndarray:
        missing = [u for u in uids if u not in self.row]
        if missing:
            raise KeyError(f"GraphDifficulty: prompt {missing[0]!r} is not in the pool given to fit_pool")
        return np.array([self.row[u] for u in uids], dtype=np.int64)

    def state_means(self) -> np.ndarray:
        return self.alpha / (self.alpha + self.beta)

    def predict(self, uids: Sequence[str]) -> np.ndarray:
        """Predicted pass rate of each prompt (pure: nothing stored)."""
        rows = self._rows(uids)
        if rows.size == 0:
            return np.zeros(0)
        c = self.config
        phi = mean_field_phi(rows, self.phi, self.W, self.s, self.f, self.alpha, self.beta, c.coupling, self.log_pi)
        m = self.state_means()
        if c.own_evidence is None:
            return phi @ m
        kappa = c.own_evidence
        per_state = (kappa * m[None, :] + self.s[rows, None]) / (kappa + self.s[rows, None] + self.f[rows, None])
        return (phi * per_state).sum(1)

    def evidence(self, uids: Sequence[str]) -> np.ndarray:
        """Decayed rollouts seen at each prompt plus at its graph neighbours (0 = pure prior)."""
        rows = self._rows(uids)
        n = self.s + self.f
        A = (self.W[rows] != 0).astype(float)
        return n[rows] + A @ n

    def observe(self, uids: Sequence[str], successes: Sequence[float], trials: Sequence[float], step: int) -> None:
        """Decay, add the batch's counts, run the online mean-field sweeps."""
        c = self.config
        if step < self.step:
            raise ValueError(f"GraphDifficulty.observe: step {step} before the last observed step {self.step}")
        if step > self.step:
            g = c.decay ** (step - self.step)
            self.s *= g
            self.f *= g
            self.step = step
        rows = self._rows(uids)
        succ, n = np.asarray(successes, dtype=float), np.asarray(trials, dtype=float)
        if (succ < 0).any() or (succ > n).any():
            raise ValueError("GraphDifficulty.observe: need 0 <= successes <= trials")
        np.add.at(self.s, rows, succ)
        np.add.at(self.f, rows, n - succ)
        touched = np.unique(np.concatenate([rows, self.W[rows].indices]))
        counted = np.flatnonzero(self.s + self.f > 0)
        for _ in range(c.sweeps):      # assignments first (theta as last left), then theta
            new = mean_field_phi(touched, self.phi, self.W, self.s, self.f, self.alpha, self.beta, c.coupling,
                                 self.log_pi)
            self.phi[touched] = (1.0 - c.damping) * self.phi[touched] + c.damping * new
            self.alpha, self.beta = mean_field_theta(self.phi[counted], self.s[counted], self.f[counted],
                                                     self.a, self.b)

    def observe_groups(self, groups, step: int) -> None:
        """Observe a step's fresh (non-replay, RL) groups: successes = rewards > threshold."""
        agg = fresh_outcomes(groups, self.config.success_threshold, self.row)
        if agg:
            uids, succ, n = list(agg), np.array([v[0] for v in agg.values()]), np.array([v[1] for v in agg.values()])
            self.last_error = self.prediction_error(uids, succ / n, step)
            self.observe(uids, succ, n, step)

    def prediction_error(self, uids: Sequence[str], rates: np.ndarray, step: int) -> dict[str, float]:
        """Before a batch's outcomes are added: mean |prediction - observed pass rate| of the
        graph (``graph_mae``) and of the per-prompt estimate (``own_mae``: the prompt's own
        Beta(1, 1) posterior mean over the same decayed counts, 0.5 for a prompt never rolled
        out), overall and over the cold prompts (no
        outcome of their own yet) and the warm ones. The observed rate is a group's sample
        mean, so both errors include its binomial noise."""
        rows = self._rows(uids)
        g = self.config.decay ** max(step - self.step, 0)      # the decay observe() applies first
        s, n = g * self.s[rows], g * (self.s[rows] + self.f[rows])
        pred = self.predict(uids)
        err_graph = np.abs(pred - rates)
        err_own = np.abs((s + 1.0) / (n + 2.0) - rates)
        cold = n == 0
        out = {"graph_mae": float(err_graph.mean()), "own_mae": float(err_own.mean()),
               "graph_cold_frac": float(cold.mean()), "graph_pred_mean": float(pred.mean()),
               "observed_pass_rate": float(np.mean(rates))}
        for name, mask in (("cold", cold), ("warm", ~cold)):
            if mask.any():
                out[f"graph_mae_{name}"] = float(err_graph[mask].mean())
                out[f"own_mae_{name}"] = float(err_own[mask].mean())
        return out

    # state: the graph is rebuilt from the pool by fit_pool; the online beliefs travel
    def state_dict(self) -> dict[str, Any]:
        if self._pending or not self.row:
            nodes = {u: list(v) for u, v in self._pending.items()}
        else:
            moved = np.abs(self.phi - 1.0 / self.config.n_states).sum(1) > 0
            seen = np.flatnonzero((self.s + self.f > 0) | moved)
            keys = list(self.row)
            nodes = {keys[i]: [float(self.s[i]), float(self.f[i]), *map(float, self.phi[i])] for i in seen}
        return {"step": self.step, "alpha": self.alpha.tolist(), "beta": self.beta.tolist(), "nodes": nodes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.alpha, self.beta = np.array(state["alpha"], dtype=float), np.array(state["beta"], dtype=float)
        if len(self.alpha) != self.config.n_states:
            raise ValueError(f"GraphDifficulty state has {len(self.alpha)} states, config {self.config.n_states}")
        self._pending = {u: [float(x) for x in v] for u, v in state["nodes"].items()}
        if self.row:
            self._apply_pending()

    def _apply_pending(self) -> None:
        K = self.config.n_states
        self.phi[:] = 1.0 / K
        self.s[:], self.f[:] = 0.0, 0.0
        for u, v in self._pending.items():
            i = self._rows([u])[0]
            self.s[i], self.f[i], self.phi[i] = v[0], v[1], np.array(v[2:2 + K])
        self._pending = {}


# ---------------------------------------------------------------------------- the switch
class DifficultyChoice(MethodConfig):
    """Config fields of a method whose difficulty estimate can be the graph estimator's."""
    difficulty: Literal["own", "graph"] = Field("own", description="own estimate, or the graph estimator")
    graph: GraphDifficultyConfig = GraphDifficultyConfig()


def graph_estimator(config: DifficultyChoice, embedder=None) -> GraphDifficulty | None:
    return GraphDifficulty(config.graph, embedder) if config.difficulty == "graph" else None


def graph_error(graph: GraphDifficulty | None) -> dict[str, float]:
    """The estimator's prediction error on the last observed batch, for a method's step stats."""
    return {} if graph is None else dict(graph.last_error)


def graph_skip_probability(p_hat: float, evidence: float, n: int, p_easy: float, p_hard: float,
                           min_keep_prob: float = 0.01) -> float:
    """GRESO's skip rule on a predicted pass rate [ours]: a group of n is all correct with
    probability p^n and all wrong with (1-p)^n (plug-in); skip with
    p^n (1 - p_easy) + (1-p)^n (1 - p_hard), at most 1 - min_keep_prob; never when no
    outcome informs the prediction (``evidence`` 0), as GRESO never skips a prompt without history."""
    if evidence <= 0:
        return 0.0
    q = p_hat ** n * (1.0 - p_easy) + (1.0 - p_hat) ** n * (1.0 - p_hard)
    return float(min(q, 1.0 - min_keep_prob))


def posterior_variance(p_graph: float, rewards: Sequence[float], kappa: float | None) -> float:
    """VIGOR's ranking variance with the graph prediction as a prior worth ``kappa`` rollouts
    [ours]: p = (kappa p_graph + sum r) / (kappa + n), variance p (1 - p)."""
    if kappa is None:
        p = p_graph
    else:
        p = (kappa * p_graph + float(np.sum(rewards))) / (kappa + len(rewards))
    p = min(max(p, 0.0), 1.0)
    return p * (1.0 - p)
