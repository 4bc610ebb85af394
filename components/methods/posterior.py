"""Per-prompt Beta posteriors over a prompt's success rate, shared by SARA, CERO and PAIR.

A prompt's posterior is Beta(prior_a + S, prior_b + F), with S and F its success and
failure counts so far; ``decay`` < 1 multiplies a prompt's old counts by ``decay`` each time
new outcomes of that prompt arrive (the policy moves, old outcomes count less); 1 keeps
them all. A reward counts as a success when it is > ``success_threshold``.
"""
from __future__ import annotations

from typing import Any, Iterable

from scipy.special import betaln
import numpy as np


def expected_bernoulli_variance(a, b):
    """E[p(1-p)] under Beta(a, b) = ab / ((a+b)(a+b+1))."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a * b / ((a + b) * (a + b + 1.0))


def beta_moment(a, b, k_success, k_fail):
    """E[p^k_success (1-p)^k_fail] under Beta(a, b) = B(a+ks, b+kf) / B(a, b)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.exp(betaln(a + k_success, b + k_fail) - betaln(a, b))


class BetaCounts:
    """Decayed success/failure counts per prompt uid (JSON state)."""

    def __init__(self, prior_a: float = 1.0, prior_b: float = 1.0, decay: float = 1.0,
                 success_threshold: float = 0.5):
        if prior_a <= 0 or prior_b <= 0:
            raise ValueError(f"Beta prior must be positive, got ({prior_a}, {prior_b})")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {decay}")
        self.prior_a, self.prior_b, self.decay = float(prior_a), float(prior_b), float(decay)
        self.success_threshold = float(success_threshold)
        self.counts: dict[str, list[float]] = {}

    def params(self, uid: str) -> tuple[float, float]:
        s, f = self.counts.get(uid, (0.0, 0.0))
        return self.prior_a + s, self.prior_b + f

    def mean(self, uid: str) -> float:
        a, b = self.params(uid)
        return a / (a + b)

    def add(self, uid: str, successes: float, failures: float) -> None:
        s, f = self.counts.get(uid, (0.0, 0.0))
        self.counts[uid] = [self.decay * s + float(successes), self.decay * f + float(failures)]

    def add_rewards(self, uid: str, rewards: Iterable[float]) -> None:
        r = [float(x) > self.success_threshold for x in rewards]
        self.add(uid, sum(r), len(r) - sum(r))

    def state_dict(self) -> dict[str, Any]:
        return {u: [float(s), float(f)] for u, (s, f) in self.counts.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts = {u: [float(s), float(f)] for u, (s, f) in state.items()}
