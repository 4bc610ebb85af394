"""VSR's vectorised buffer (array scoring, ordered-dict eviction) against the direct scalar
definition: same states in the same order with the same scores, same draws for the same RNG,
same evictions, on random buffers with ties, short trajectories and repeated cuts."""
from __future__ import annotations

import random

import numpy as np
import pytest

from components.methods.base import Group
from components.methods.vsr import VSR, VSRConfig, Trajectory, sigma_hat


def scalar_states(vsr: VSR):
    out = []
    for uid in sorted(vsr.buffer):
        t = vsr.buffer[uid]
        L = len(t.response_ids)
        if vsr.config.cut_points == "every":
            cuts = list(range(vsr.config.cut_stride, L, vsr.config.cut_stride))
        else:
            cuts = sorted(c for c in {int(round(f * L)) for f in vsr.config.cut_fractions} if 0 < c < L)
        for c in cuts:
            s = 1.0 if vsr.config.scoring == "uniform" else sigma_hat(vsr.p0.get(uid, vsr.config.p0_default), c / L)
            out.append((uid, c, s))
    return out


def scalar_evict(buffer: dict, step: int, window, capacity) -> set:
    b = dict(buffer)
    if window is not None:
        for u in [u for u, t in b.items() if step - t.inserted_step >= window]:
            del b[u]
    if len(b) > capacity:
        for u in sorted(b, key=lambda u: (b[u].inserted_step, u))[: len(b) - capacity]:
            del b[u]
    return set(b)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("scoring", ["sigma", "uniform"])
@pytest.mark.parametrize("cuts", ["fractions", "every", "every-3"])
@pytest.mark.parametrize("replacement", [True, False])
def test_states_scores_and_draws_equal_the_scalar_definition(seed, scoring, cuts, replacement):
    r = random.Random(seed)
    fr = tuple(sorted(r.sample([0.1, 0.25, 0.3, 0.5, 0.6, 0.75, 0.9], k=r.randint(1, 4))))
    rule = {"cut_points": "fractions", "cut_fractions": fr} if cuts == "fractions" else \
        {"cut_points": "every", "cut_stride": int(cuts.split("-")[1]) if "-" in cuts else 1}
    vsr = VSR(VSRConfig(**rule, scoring=scoring, p0_default=r.random() * 0.2, replacement=replacement))
    for i in range(r.randint(1, 300)):
        uid = f"q{r.randint(0, 10_000)}"
        vsr.buffer[uid] = Trajectory(uid, list(range(r.randint(1, 40))), 0, "policy")   # L=1..3: few/no cuts
        if r.random() < 0.7:
            vsr.p0[uid] = r.random()
    ref = scalar_states(vsr)
    assert vsr.prefix_states() == ref                      # exact: same floats, same order
    k = r.randint(1, max(1, len(ref)))
    a = vsr.select_replays(k, np.random.default_rng(seed))
    w = np.array([s[2] for s in ref])
    p = w / w.sum() if w.sum() > 0 else np.full(len(ref), 1 / len(ref))
    if replacement:
        idx = np.random.default_rng(seed).choice(len(ref), size=k, replace=True, p=p)
    else:
        idx = np.random.default_rng(seed).choice(len(ref), size=k, replace=False, p=p) if k < len(ref) else np.arange(k)
    assert a == [ref[i] for i in sorted(idx.tolist())]


@pytest.mark.parametrize("seed", range(8))
def test_eviction_equals_the_sort_based_definition(seed):
    r = random.Random(seed)
    window = r.choice([None, 3, 5])
    capacity = r.randint(5, 40)
    vsr = VSR(VSRConfig(window_steps=window, capacity=capacity, n=2))
    for step in range(1, 15):
        before = dict(vsr.buffer)
        groups = []
        for _ in range(r.randint(0, 12)):
            uid = f"q{r.randint(0, 30)}"   # repeats: replaced trajectories move to the end
            groups.append(Group(uid=f"g{step}{uid}", problem_uid=uid, answer="1", context_ids=(1, 2), prompt_len=2,
                                responses=[(5, 6, 7), (8,)], texts=["", ""], rewards=[1.0, 0.0]))
        vsr.step = step
        vsr.observe(groups)
        # reference: apply the same inserts to the previous buffer, then the sort-based rules
        ref = dict(before)
        for g in groups:
            ref[g.problem_uid] = Trajectory(g.problem_uid, [5, 6, 7], step, "policy")
        assert set(vsr.buffer) == scalar_evict(ref, step, window, capacity)
        steps = [t.inserted_step for t in vsr.buffer.values()]
        assert steps == sorted(steps)                       # the order invariant _evict relies on


def test_state_round_trip_restores_the_order_invariant():
    vsr = VSR(VSRConfig(capacity=2, window_steps=None))
    # an old checkpoint could list entries out of step order
    state = {"buffer": {"b": {"problem_uid": "b", "response_ids": [1, 2], "inserted_step": 5, "source": "policy"},
                        "a": {"problem_uid": "a", "response_ids": [1, 2], "inserted_step": 1, "source": "policy"},
                        "c": {"problem_uid": "c", "response_ids": [1, 2], "inserted_step": 3, "source": "policy"}},
             "p0": {}, "step": 5}
    vsr.load_state_dict(state)
    vsr._evict()
    assert set(vsr.buffer) == {"b", "c"}                    # the oldest (a, step 1) evicted
