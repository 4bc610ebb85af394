"""A rollout engine of coin flips for allocator tests: one token per sample, '0' or '1', seeded
by (sampling seed, request tag), every call metered; and the rule grader that goes with it."""
from __future__ import annotations

import numpy as np

from components.engine.base import Completion, TokenMeter


class CoinEngine:
    def __init__(self):
        self.meter, self.tokenizer = TokenMeter(), None

    def generate(self, reqs, params, purpose="train_rollout"):
        out = []
        for r in reqs:
            rng = np.random.default_rng([params.seed or 0, *map(ord, r.tag)])
            out.append([Completion((int(x) + 5,), str(int(x)), "stop") for x in rng.integers(0, 2, r.n)])
        n = sum(r.n for r in reqs)
        self.meter.record(purpose, sum(len(r.context_ids) for r in reqs), n, n, len(reqs))
        return out


def coin_grade(texts, golds):
    """gold '1': always right, '0': always wrong, otherwise right when the sample is '1'."""
    return [(1.0 if g == "1" else 0.0 if g == "0" else float(t == "1"), "rule") for t, g in zip(texts, golds)]
