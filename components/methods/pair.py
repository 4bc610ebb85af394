"""PAIR: Pairwise-Aware Inclusion Reweighting (arXiv 2608.11368; from its abstract;
no public code; docs/methods.md §10). Each rule names its abstract sentence; every open
choice is a config knob marked [ours].

- "the unclipped leave-one-out group-relative score gradient is ... a second-order U-statistic
  over pairs": with K candidates, A_i = r_i - mean_{j != i} r_j, so
  (1/K) sum_i A_i grad log pi(y_i) = 1/(K(K-1)) sum_{i != j} (r_i - r_j) grad log pi(y_i).
- "treats short rollout prefixes as vertices": each prompt gets ``K`` candidates, decoded to
  ``prefix_tokens`` tokens first [ours: K = 8, 16 tokens]. A candidate that ends (EOS) inside
  its prefix is complete (continuation probability 1, no cost).
- "A prefix-only predictor estimates correctness and remaining token cost" [ours]:
  correctness q_i = sigmoid(w . phi(prefix)), phi = [1, logit of the prompt's Beta posterior
  mean, hashed bag of the prefix's token ids (``hash_dim`` buckets, share of the prefix)],
  trained online by logistic-regression steps on completed candidates, each weighted by
  1/pi_i (so the training set is design-unbiased too); remaining cost = an EMA of observed
  suffix lengths (initially max_new_tokens - prefix_tokens).
- "a convex design chooses positive continuation probabilities under an expected
  suffix-token budget" [the objective is ours]: :func:`pair_design` minimises the HT variance
  proxy sum_{i<j} m_ij / (pi_i pi_j), m_ij = q_i(1-q_j) + q_j(1-q_i) = the predicted E[(r_i - r_j)^2]
  of the pair term, subject to sum_i c_i pi_i <= S and ``pi_min`` <= pi_i <= 1, with
  S = ``suffix_budget_frac`` x sum_i c_i over the step's open candidates [ours: 0.5, pi_min 0.1].
  1/(pi_i pi_j) is jointly convex on the positive orthant, so this is a convex program; solved
  by bisection on the budget's multiplier mu and, for each mu, damped coordinate minimisation
  (pi_i = sqrt(sum_j m_ij/pi_j / (mu c_i)), clipped; exact per coordinate).
- "each edge induced by completed vertices is inverse-weighted by its logged joint inclusion
  probability": candidates are continued independently, Bernoulli(pi_i) with the step's rng,
  so pi_ij = pi_i pi_j (docs/methods.md §10 [INF]); the logged pi_i are in ``meta["pair_pi"]``. A
  completed candidate's advantage (:func:`ht_advantages`) is
      A_i = 1/(K-1) sum_{j completed, j != i} (r_i - r_j) / (pi_i pi_j),
  exactly RLOO's when every candidate is completed. Under "conditionally independent on-policy
  rollouts and an unclipped, unstandardized objective" (1/K) sum_completed A_i grad log pi(y_i)
  is design-unbiased for the complete-pair gradient (tests/methods/test_pair.py simulates it).
  The trainer averages its loss over the batch's sequences; ``scale_to_candidates`` (default)
  multiplies every A_i by (sequences in the batch) / (candidates in the batch), so its 1/rows
  becomes the estimator's 1/K. The trainer takes them from ``sample_advantages``.

Tokens: a candidate's prefix and its continuation are one sequence (the loss sees both, the
prompt is context); prefixes that are not continued are metered as ``discarded``. A step
generates K x B sequences (``rollouts_per_step``); the continuation call's sequences are
netted out of the meter because they extend sequences it already counted.
"""
from __future__ import annotations

import math
import zlib
from typing import Any, Sequence

import numpy as np
from pydantic import Field

from components.data.schema import Problem
from components.engine.base import Request, SamplingParams
from components.methods.base import Group, MethodConfig, RolloutContext, Method
from components.methods.posterior import BetaCounts


# ---------------------------------------------------------------------------- the core rules
def pair_weights(q: np.ndarray) -> np.ndarray:
    """m_ij = q_i(1-q_j) + q_j(1-q_i) (predicted E[(r_i - r_j)^2]), zero diagonal; q [..., K]."""
    q = np.asarray(q, dtype=float)
    m = q[..., :, None] * (1 - q[..., None, :]) + q[..., None, :] * (1 - q[..., :, None])
    return m * (1.0 - np.eye(q.shape[-1]))


def design_objective(m: np.ndarray, pi: np.ndarray) -> float:
    """sum_{i<j} m_ij / (pi_i pi_j)."""
    return float(0.5 * (m / (pi[..., :, None] * pi[..., None, :])).sum())


def _solve_mu(m, cost, free, mu, pi_min, iters, pi=None):
    pi = np.where(free, 0.5, 1.0) if pi is None else pi
    for _ in range(iters):
        A = np.einsum("...ij,...j->...i", m, 1.0 / pi)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = np.sqrt(A / (mu * cost))
        new = np.clip(np.nan_to_num(new, nan=pi_min, posinf=1.0), pi_min, 1.0)
        pi = np.where(free, np.sqrt(pi * new), 1.0)
    return pi


def pair_design(m: np.ndarray, cost: np.ndarray, fixed: np.ndarray, budget: float, pi_min: float = 0.1,
                iters: int = 60, bisect: int = 40, warm_iters: int = 12) -> np.ndarray:
    """Continuation probabilities [G, K]: min sum_{i<j} m_ij/(pi_i pi_j) s.t. sum c_i pi_i <= budget
    over the free (not ``fixed``) candidates, pi in [pi_min, 1]; fixed candidates have pi = 1.
    Bisection on the multiplier mu; each mu's coordinate iterations start from the last mu's pi."""
    m, cost, fixed = np.asarray(m, dtype=float), np.asarray(cost, dtype=float), np.asarray(fixed, dtype=bool)
    free = ~fixed
    cost = np.where(free, np.maximum(cost, 1e-9), 0.0)
    if (cost * free).sum() <= budget:
        return np.ones(cost.shape)
    if (cost * free).sum() * pi_min > budget:
        raise ValueError(f"pair_design: budget {budget:.1f} below pi_min x cost {(cost * free).sum() * pi_min:.1f}")
    pi = _solve_mu(m, cost, free, 1.0, pi_min, iters)
    lo, hi = 0.0, 1.0
    while float((cost * pi).sum()) > budget:
        lo, hi = hi, hi * 16.0
        pi = _solve_mu(m, cost, free, hi, pi_min, warm_iters, pi)
    for _ in range(bisect):
        mid = math.sqrt(lo * hi) if lo > 0 else hi / 16.0
        trial = _solve_mu(m, cost, free, mid, pi_min, warm_iters, pi)
        if float((cost * trial).sum()) > budget:
            lo = mid
        else:
            hi, pi = mid, trial
    pi = _solve_mu(m, cost, free, hi, pi_min, iters, pi)
    while float((cost * pi).sum()) > budget:       # the polish moved it over: raise the price
        hi *= 1.0 + 1e-6
        pi = _solve_mu(m, cost, free, hi, pi_min, warm_iters, pi)
    return pi


def ht_advantages(rewards: Sequence[float], pi: Sequence[float], K: int) -> list[float]:
    """A_i = 1/(K-1) sum_{j != i} (r_i - r_j) / (pi_i pi_j) over the completed candidates given."""
    r, p = np.asarray(rewards, dtype=float), np.asarray(pi, dtype=float)
    if len(r) == 0 or K < 2:
        return [0.0] * len(r)
    w = 1.0 / (p[:, None] * p[None, :])
    d = (r[:, None] - r[None, :]) * w
    return (d.sum(1) / (K - 1)).tolist()


def audit(rewards: np.ndarray, grads: np.ndarray, pi: np.ndarray, draws: int,
          rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The abstract's frozen-population audit. ``rewards`` [G, K] and score-function vectors
    ``grads`` [G, K, D] are fixed; each of ``draws`` designs continues candidate i with
    probability ``pi`` [G, K]. Returns the complete-pair target (1/K) sum_i A_i g_i per group and,
    over the draws, the mean and standard error of the HT estimator (:func:`ht_advantages` on the
    completed set) and of the unweighted adaptive one (RLOO over the completed set), [G, D] each."""
    G, K, D = grads.shape
    target = np.stack([np.asarray(ht_advantages(rewards[g], np.ones(K), K)) @ grads[g] / K for g in range(G)])
    ht, unw = np.zeros((draws, G, D)), np.zeros((draws, G, D))
    for g in range(G):                        # all draws of a group at once
        inc = (rng.random((draws, K)) < pi[g]).astype(float)
        W = (rewards[g][:, None] - rewards[g][None, :]) / np.outer(pi[g], pi[g]) / (K - 1)
        ht[:, g] = (inc * (inc @ W.T)) @ grads[g] / K
        n = inc.sum(1, keepdims=True)
        loo = rewards[g] - ((inc @ rewards[g])[:, None] - rewards[g]) / np.maximum(n - 1, 1)
        unw[:, g] = np.where(n > 1, (inc * loo) @ grads[g] / np.maximum(n, 1), 0.0)
    se = lambda x: x.std(0) / math.sqrt(draws)
    return {"target": target, "ht_mean": ht.mean(0), "ht_se": se(ht), "unweighted_mean": unw.mean(0),
            "unweighted_se": se(unw)}


def prefix_features(prefix_ids: Sequence[int], prompt_mean: float, dim: int) -> np.ndarray:
    phi = np.zeros(dim + 2)
    phi[0] = 1.0
    pm = min(max(prompt_mean, 1e-3), 1 - 1e-3)
    phi[1] = math.log(pm / (1 - pm))
    if prefix_ids:
        idx = np.array([zlib.crc32(int(t).to_bytes(4, "little")) % dim for t in prefix_ids])
        phi[2:] = np.bincount(idx, minlength=dim) / len(prefix_ids)
    return phi


# ---------------------------------------------------------------------------- the method
class PAIRConfig(MethodConfig):
    K: int = Field(8, ge=2, description="candidates (prefixes) per prompt")
    prefix_tokens: int = Field(16, ge=1, description="tokens decoded for every candidate [ours]")
    suffix_budget_frac: float = Field(0.5, gt=0.0, le=1.0, description="expected suffix tokens / all [ours]")
    pi_min: float = Field(0.1, gt=0.0, le=1.0, description="smallest continuation probability [ours]")
    hash_dim: int = Field(32, ge=1)
    lr: float = Field(0.1, gt=0.0, description="predictor step size [ours]")
    cost_ema: float = Field(0.9, ge=0.0, lt=1.0, description="remaining-cost EMA factor [ours]")
    prior_a: float = Field(1.0, gt=0.0)
    prior_b: float = Field(1.0, gt=0.0)
    success_threshold: float = 0.5
    scale_to_candidates: bool = True


class PAIR(Method):
    name = "pair"
    Config = PAIRConfig

    def __init__(self, config: PAIRConfig):
        super().__init__(config)
        c = config
        self.w = np.zeros(c.hash_dim + 2)
        self.cost: float | None = None
        self.post = BetaCounts(c.prior_a, c.prior_b, 1.0, c.success_threshold)
        self._seen: list[tuple[list[float], float, float, str]] = []   # (phi, reward, pi, uid)
        self._suffix_lengths: list[int] = []

    def predict(self, phi: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(np.asarray(phi) @ self.w)))

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        c, s = self.config, ctx.sampling
        P = min(c.prefix_tokens, s.max_new_tokens)
        seed = None if s.seed is None else s.seed + 1_000_003 * ctx.step
        prompts = [tuple(ctx.encode_prompt(p)) for p in batch]
        pre = ctx.engine.generate([Request(ids, n=c.K, prompt_len=len(ids), tag=p.uid) for ids, p in zip(prompts, batch)],
                                  SamplingParams(s.temperature, s.top_p, P, seed))
        G, K = len(batch), c.K
        fixed = np.array([[comp.finish_reason == "stop" or P >= s.max_new_tokens for comp in cs] for cs in pre])
        phi = np.array([[prefix_features(comp.token_ids, self.post.mean(p.uid), c.hash_dim) for comp in cs]
                        for cs, p in zip(pre, batch)])
        q = self.predict(phi)
        remaining = max(s.max_new_tokens - P, 1)
        c_hat = float(self.cost) if self.cost is not None else float(remaining)
        cost = np.where(fixed, 0.0, c_hat)
        pi = pair_design(pair_weights(q), cost, fixed, c.suffix_budget_frac * cost.sum(), c.pi_min)
        cont = (~fixed) & (rng.random((G, K)) < pi)
        done = fixed | cont
        # continue the chosen prefixes: one request each, the prefix is its context
        todo = [(g, i) for g in range(G) for i in range(K) if cont[g, i]]
        suffix = {}
        if todo:
            reqs = [Request(prompts[g] + tuple(pre[g][i].token_ids), n=1, prompt_len=len(prompts[g]),
                            tag=f"{batch[g].uid}#{i}") for g, i in todo]
            outs = ctx.engine.generate(reqs, SamplingParams(s.temperature, s.top_p, remaining,
                                                            None if seed is None else seed + 7))
            ctx.engine.meter.record("train_rollout", 0, 0, -len(todo), requests=0)
            suffix = {gi: o[0] for gi, o in zip(todo, outs)}
        # the prefixes that stop here are discarded rollouts
        stopped = [len(pre[g][i].token_ids) for g in range(G) for i in range(K) if not done[g, i]]
        if stopped:
            ctx.engine.meter.reclassify("discarded", sum(stopped), len(stopped))
        rows = []
        for g in range(G):
            for i in range(K):
                if done[g, i]:
                    tail = suffix.get((g, i))
                    ids = tuple(pre[g][i].token_ids) + (tuple(tail.token_ids) if tail else ())
                    txt = pre[g][i].text + (tail.text if tail else "")
                    rows.append((g, i, ids, txt, tail.finish_reason if tail else pre[g][i].finish_reason))
        graded = ctx.grade([r[3] for r in rows], [batch[r[0]].answer for r in rows]) if rows else []
        if len(graded) != len(rows):
            raise RuntimeError(f"pair: grader returned {len(graded)} scores for {len(rows)} responses")
        by_group: dict[int, list] = {}
        for (g, i, ids, txt, fin), (score, reason) in zip(rows, graded):
            by_group.setdefault(g, []).append((i, ids, txt, fin, float(score), reason))
        n_rows = len(rows)
        scale = n_rows / float(G * K) if c.scale_to_candidates else 1.0
        groups, self._seen, self._suffix_lengths = [], [], []
        for g, members in sorted(by_group.items()):
            p, ids = batch[g], prompts[g]
            pis = [float(pi[g, i]) for i, *_ in members]
            rs = [m[4] for m in members]
            adv = [a * scale for a in ht_advantages(rs, pis, K)]
            grp = Group(uid=p.uid, problem_uid=p.uid, answer=p.answer, context_ids=ids, prompt_len=len(ids),
                        responses=[m[1] for m in members], texts=[m[2] for m in members], rewards=rs,
                        reasons=[m[5] for m in members], finish_reasons=[m[3] for m in members])
            grp.meta.update(pair_advantages=adv, pair_pi=pis, pair_candidate=[m[0] for m in members], pair_K=K)
            groups.append(grp)
            for (i, *_), r, pv in zip(members, rs, pis):
                self._seen.append((phi[g, i].tolist(), r, pv, p.uid))
        self._suffix_lengths = [len(t.token_ids) for t in suffix.values()]
        self.last_stats = {"rollouts": float(G * K), "continued": float(cont.sum()), "finished_in_prefix":
                           float(fixed.sum()), "completed": float(n_rows), "pi_mean": float(pi[~fixed].mean())
                           if (~fixed).any() else 1.0, "q_mean": float(q.mean())}
        return groups

    def observe(self, groups: list[Group]) -> None:
        c = self.config
        if self._seen:
            phi = np.array([s[0] for s in self._seen])
            r = np.array([float(s[1] > c.success_threshold) for s in self._seen])
            wt = 1.0 / np.array([s[2] for s in self._seen])
            self.w = self.w + c.lr * ((wt * (r - self.predict(phi))) @ phi) / len(r)
            for _, rr, pv, uid in self._seen:
                ok = float(rr > c.success_threshold)
                self.post.add(uid, ok / pv, (1.0 - ok) / pv)
        for L in self._suffix_lengths:
            self.cost = float(L) if self.cost is None else c.cost_ema * self.cost + (1 - c.cost_ema) * L
        self._seen, self._suffix_lengths = [], []

    def sample_advantages(self, group: Group) -> list[float] | None:
        return group.meta.get("pair_advantages")

    def rollouts_per_step(self, batch_size: int) -> int:
        return self.config.K * batch_size

    def state_dict(self) -> dict[str, Any]:
        return {"w": [float(x) for x in self.w], "cost": self.cost, "posterior": self.post.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.w = np.array(state["w"], dtype=float)
        self.cost = None if state["cost"] is None else float(state["cost"])
        self.post.load_state_dict(state["posterior"])
        self._seen, self._suffix_lengths = [], []
