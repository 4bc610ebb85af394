"""CERO: adaptive rollout budgeting as online resource allocation (Zong, Wang, Jiang;
arXiv 2606.05606; from its abstract; no public code; docs/methods.md §10, TV14).
Each rule names its abstract sentence; every open choice is a config knob marked [ours].

- "maintains a Beta posterior over each prompt's success probability": Beta(prior_a + S,
  prior_b + F) per prompt (:class:`~components.methods.posterior.BetaCounts`; ``decay`` = 1
  keeps every outcome, as a plain posterior) [prior Beta(1, 1): ours].
- "the posterior expected Bernoulli variance as a Bayesian estimate of the value of
  additional rollouts": v_i = E[p(1-p)] = ab / ((a+b)(a+b+1)) (TV14).
- "a concave, saturating utility over cumulative allocations": [ours]
  U_i(N) = v_i kappa (1 - exp(-N / kappa)), N = the prompt's rollouts over all steps so far.
  Why this form: concave and bounded (saturating) with U_i'(0) = v_i, so the first rollouts of
  a prompt are worth its posterior variance and each later one exp(-1/kappa) times the one before; its
  concave conjugate has a closed form, so the dual below needs no inner solver. ``kappa``
  (default 2 x ``n_mean`` = 16) is the cumulative allocation at which a prompt's marginal value
  has fallen to 1/e of v_i: two groups' worth.
- "decisions across prompts and epochs are coupled by the global budget": the run may spend
  ``n_mean`` x batch rollouts per step on average, total C = n_mean x B x ``horizon_steps``
  (with ``horizon_steps`` set, a step never spends more than what is left of C).
- "Fenchel-dual reformulation ... update both prompt-level and budget-level dual variables via
  projected online gradient descent": U_i(N) = min_{0 < theta <= v_i} theta N - U_i*(theta),
  with U_i*(theta) = kappa (theta ln(v_i/theta) + theta - v_i) and grad U_i*(theta) =
  N*(theta) = kappa ln(v_i / theta). Per step, given prompt duals theta_i and the budget
  multiplier lambda, each prompt gets the allocation that brings its cumulative total to
  where its dual price meets the budget price (:func:`allocation`):
      n_i = clip(round(kappa ln(theta_i / lambda)), n_min, n_max),
  (with theta_i = U_i'(N_i) that is exactly the best response max_n U_i(N_i + n) - lambda n).
  Then, after the outcomes (:func:`theta_step`, :func:`lambda_step`):
      log theta_i <- log theta_i - (eta_theta / kappa) (N_i - N*(theta_i)),  theta_i in [theta_min, v_i]
      log lambda <- proj(log lambda + eta_lambda (spent - allowed) / rho)
  rho = n_mean x B, ``spent`` the rollouts of all steps so far and ``allowed`` = the sum of
  their rho: the gradient of the Lagrangian in lambda is the global constraint's violation on
  the path so far (the coupling across epochs), not one step's over-spend. Step sizes [ours]:
  both duals are prices that fall geometrically as cumulative allocations grow
  (U' = v exp(-N/kappa)), so both steps are taken on their logs. For theta the step
  eta_theta/kappa makes the update log theta <- (1 - eta) log theta + eta log U'(N):
  eta_theta = 1 lands on the tangent price at once, the default 0.5 moves half way (damped,
  stable when v_i moves with the posterior). eta_lambda = 0.5 on log lambda.
- A step's spend is kept in [(1 - band), (1 + band)] x rho (``step_band`` = 0.25 [ours]) by
  moving that step's price to the nearest one in the band (:func:`banded_allocation`); the
  horizon's remaining budget caps it too. Why these defaults (kappa = 16, eta_lambda = .5, band
  .25, the path gradient): on frozen populations (``tests/methods/test_sara_cero.py``: 24 or 100
  prompts, pass rates .02-.5, revisited every epoch, 60 steps) the run spends its
  budget to within 1 % (0.996, 0.992) at a per-step spread of 8-22 % of rho; a per-step
  gradient (spend - rho; ``lambda_gradient: step``) lags the falling price and under-spends
  (0.774, 0.879); without the band the step's spend swings by 54-117 % of rho; kappa = 8
  under-spends on the small population (0.936). The tests pin the first two.
- lambda_0 = v_0 exp(-n_mean / kappa), v_0 = E[p(1-p)] under the prior: a fresh prompt then gets
  exactly ``n_mean``; a prompt seen for the first time starts at theta_i = v_i.

``rollouts_per_step(B)`` = n_mean x B is the average the budget allows; a step's own count
varies (``last_stats["rollouts"]``, cumulative ``spent`` in ``step_stats``).
"""
from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from components.data.schema import Problem
from components.methods.base import Group, Method, MethodConfig, RolloutContext, item_uid
from components.methods.posterior import BetaCounts, expected_bernoulli_variance


# ---------------------------------------------------------------------------- the core rule
def utility(N, v, kappa: float):
    return np.asarray(v, dtype=float) * kappa * (1.0 - np.exp(-np.asarray(N, dtype=float) / kappa))


def conjugate(theta, v, kappa: float):
    """Concave conjugate U*(theta) = inf_N theta N - U(N), for 0 < theta <= v."""
    theta, v = np.asarray(theta, dtype=float), np.asarray(v, dtype=float)
    return kappa * (theta * np.log(v / theta) + theta - v)


def n_star(theta, v, kappa: float):
    """grad U*(theta): the cumulative allocation whose marginal utility is theta."""
    return kappa * np.log(np.asarray(v, dtype=float) / np.asarray(theta, dtype=float))


def allocation(theta, lam: float, kappa: float, n_min: int, n_max: int) -> list[int]:
    x = kappa * np.log(np.asarray(theta, dtype=float) / lam)
    return np.clip(np.floor(x + 0.5), n_min, n_max).astype(int).tolist()


def theta_step(theta, N, v, kappa: float, eta: float, theta_min: float):
    """One projected gradient step on log theta for D(theta) = theta N - U*(theta):
    log theta <- log theta - (eta / kappa) (N - N*(theta)), then theta clipped to [theta_min, v]."""
    theta, v = np.asarray(theta, dtype=float), np.asarray(v, dtype=float)
    grad = np.asarray(N, dtype=float) - n_star(theta, v, kappa)
    return np.clip(theta * np.exp(-eta * grad / kappa), theta_min, v)


def lambda_step(lam: float, spent: float, allowed: float, rho: float, eta: float, lam_min: float,
                lam_max: float) -> float:
    """Projected gradient step on log lambda; the gradient is the global budget's violation so
    far, in steps' worth: log lambda += eta (spent - allowed) / rho, clipped."""
    return float(min(max(lam * math.exp(eta * (spent - allowed) / rho), lam_min), lam_max))


def banded_allocation(theta, lam: float, kappa: float, n_min: int, n_max: int, low: float | None = None,
                      high: float | None = None) -> tuple[list[int], float]:
    """``allocation`` at price lambda, or at the nearest price whose total lies in [low, high]
    (bisection on log lambda); returns (allocation, price used)."""
    theta = np.asarray(theta, dtype=float)
    n = allocation(theta, lam, kappa, n_min, n_max)
    if high is not None and n_min * len(n) > high:
        raise RuntimeError(f"cero: the global budget has {high:.0f} rollouts left, fewer than "
                           f"n_min x batch = {n_min * len(n)}")
    if high is not None and sum(n) > high:
        fits, lo, hi = (lambda s: s <= high), math.log(lam), math.log(theta.max()) + n_max / kappa + 1.0
    elif low is not None and sum(n) < low and n_max * len(n) >= low:
        fits, lo, hi = (lambda s: s >= low), math.log(lam), math.log(theta.min()) - n_max / kappa - 1.0
    else:
        return n, lam
    for _ in range(100):                      # lo: log price that does not fit, hi: one that does
        mid = 0.5 * (lo + hi)
        if fits(sum(allocation(theta, math.exp(mid), kappa, n_min, n_max))):
            hi = mid
        else:
            lo = mid
    return allocation(theta, math.exp(hi), kappa, n_min, n_max), math.exp(hi)


# ---------------------------------------------------------------------------- the method
class CEROConfig(MethodConfig):
    n_mean: int = Field(8, ge=1, description="average rollouts per prompt the global budget allows")
    n_min: int = Field(2, ge=1)
    n_max: int = Field(32, ge=1)
    kappa: float | None = Field(None, gt=0, description="utility scale; None = 2 x n_mean [ours]")
    prior_a: float = Field(1.0, gt=0)
    prior_b: float = Field(1.0, gt=0)
    decay: float = Field(1.0, ge=0.0, le=1.0)
    eta_theta: float = Field(0.5, gt=0, le=1.0, description="prompt-dual step on log theta (x 1/kappa) [ours]")
    eta_lambda: float = Field(0.5, gt=0, description="budget-multiplier step on log lambda [ours]")
    lambda_gradient: Literal["path", "step"] = Field("path", description="budget violation so far | this step's [ours]")
    step_band: float = Field(0.25, ge=0.0, description="a step spends within (1 +- band) x n_mean x B [ours]")
    horizon_steps: int | None = Field(None, ge=1, description="steps the global budget covers")
    success_threshold: float = 0.5

    @model_validator(mode="after")
    def _bounds(self):
        if not self.n_min <= self.n_mean <= self.n_max:
            raise ValueError(f"need n_min ({self.n_min}) <= n_mean ({self.n_mean}) <= n_max ({self.n_max})")
        return self

    @property
    def k(self) -> float:
        return float(self.kappa if self.kappa is not None else 2 * self.n_mean)


class CERO(Method):
    name = "cero"
    Config = CEROConfig

    def __init__(self, config: CEROConfig):
        super().__init__(config)
        c = config
        self.post = BetaCounts(c.prior_a, c.prior_b, c.decay, c.success_threshold)
        v0 = float(expected_bernoulli_variance(c.prior_a, c.prior_b))
        self.lam0 = v0 * math.exp(-c.n_mean / c.k)
        self.lam = self.lam0
        self.theta: dict[str, float] = {}
        self.N: dict[str, float] = {}
        self.t = 0
        self.spent = 0
        self.allowed = 0
        self._alloc: dict[str, int] = {}

    def value(self, uid: str) -> float:
        return float(expected_bernoulli_variance(*self.post.params(uid)))

    def plan(self, uids: Sequence[str]) -> list[int]:
        """The step's allocation for the batch's prompt uids (remembered for ``observe``)."""
        c = self.config
        if len(set(uids)) != len(uids):
            raise ValueError("cero: a batch must not repeat a prompt")
        theta = np.array([self.theta.get(u, self.value(u)) for u in uids])
        rho = c.n_mean * len(uids)
        low, high = (1 - c.step_band) * rho, (1 + c.step_band) * rho
        if c.horizon_steps is not None:
            high = min(high, c.n_mean * len(uids) * c.horizon_steps - self.spent)
        ns, price = banded_allocation(theta, self.lam, c.k, c.n_min, c.n_max, low, high)
        self._alloc = dict(zip(uids, ns))
        self._rho = c.n_mean * len(uids)
        self.last_stats = {"rollouts": float(sum(ns)), "n_min": float(min(ns)), "n_max": float(max(ns)),
                           "lambda": float(price), "theta_mean": float(theta.mean())}
        return ns

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        ns = self.plan([item_uid(p) for p in batch])
        groups = ctx.sample_groups(ctx.prompt_items(batch), ns)
        for g, n in zip(groups, ns):
            g.meta["cero_n"] = n
        return groups

    def observe(self, groups: list[Group]) -> None:
        c = self.config
        for g in groups:
            if not g.is_replay and not g.supervised and g.rewards:
                self.post.add_rewards(str(g.problem_uid), g.rewards)
        if not self._alloc:
            return
        uids = list(self._alloc)
        for u in uids:
            self.N[u] = self.N.get(u, 0.0) + self._alloc[u]
        v = np.array([self.value(u) for u in uids])
        theta = np.minimum(np.array([self.theta.get(u, vi) for u, vi in zip(uids, v)]), v)
        theta_min = self.lam0 * 1e-6
        new = theta_step(theta, [self.N[u] for u in uids], v, c.k, c.eta_theta, theta_min)
        self.theta.update(zip(uids, new.tolist()))
        self.spent += int(sum(self._alloc.values()))
        self.allowed += self._rho
        spent, allowed = (self.spent, self.allowed) if c.lambda_gradient == "path" else (sum(self._alloc.values()), self._rho)
        self.lam = lambda_step(self.lam, spent, allowed, self._rho, c.eta_lambda, self.lam0 * 1e-6, 0.25)
        self.t += 1
        self._alloc = {}

    def rollouts_per_step(self, batch_size: int) -> int:
        """The average per step the global budget allows (a step's own count varies)."""
        return self.config.n_mean * batch_size

    def step_stats(self) -> dict[str, float]:
        return {**self.last_stats, "spent": float(self.spent), "lambda_next": float(self.lam)}

    def state_dict(self) -> dict[str, Any]:
        return {"posterior": self.post.state_dict(), "theta": dict(self.theta), "N": dict(self.N),
                "lambda": self.lam, "t": self.t, "spent": self.spent, "allowed": self.allowed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.post.load_state_dict(state["posterior"])
        self.theta = {u: float(x) for u, x in state["theta"].items()}
        self.N = {u: float(x) for u, x in state["N"].items()}
        self.lam, self.t, self.spent = float(state["lambda"]), int(state["t"]), int(state["spent"])
        self.allowed = int(state["allowed"])
        self._alloc = {}
