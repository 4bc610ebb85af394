"""VIGOR's selection rule (its ablation, Figure 5 left): variance (the paper's), random,
difficulty; the same rounds and budget for each, on a tiny policy with a rule reward."""
from __future__ import annotations

import numpy as np
import pytest

from components.data.prompting import encode_prompt
from components.data.synthetic import generate_problems
from components.engine.base import SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.methods.base import RolloutContext
from components.methods.registry import build
from components.methods.vigor import bernoulli_var


def parity_reward(texts, golds):
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


@pytest.fixture(scope="module")
def batch():
    return generate_problems(8, [3], seed=1)


def rollout(name, model, tok, batch, seed=0, **config):
    m = build(name, config)
    m.setup(batch, {})
    ctx = RolloutContext(engine=HFEngine(model, tok, meter=TokenMeter()), grade=parity_reward,
                         encode_prompt=lambda p: encode_prompt(p, tok, "raw"), sampling=SamplingParams(1.0, 1.0, 16, 0))
    with ctx.engine.meter.tagged(step=0):
        return m, m.rollout(batch, ctx, np.random.default_rng(seed))


def rounds(groups, t):
    """(rewards seen before round t of each prompt active in round t-1, the prompts expanded in t)."""
    prev = [g for g in groups if g.meta["rounds"] >= t]
    seen = {g.uid: [r for r, k in zip(g.rewards, g.meta["round_of_sample"]) if k < t] for g in prev}
    return seen, {g.uid for g in prev if g.meta["rounds"] > t}


@pytest.mark.parametrize("name", ["vigor", "vigor_random", "vigor_difficulty"])
def test_every_rule_spends_the_same_budget(name, model, tok, batch):
    m, groups = rollout(name, model, tok, batch)
    assert sum(g.n for g in groups) == 64 == m.rollouts_per_step(8) == build("vigor", {}).rollouts_per_step(8)
    assert [len(rounds(groups, t)[1]) for t in (1, 2, 3)] == [4, 2, 1]


def test_difficulty_expands_the_lowest_success_rate_first(model, tok, batch):
    _, groups = rollout("vigor_difficulty", model, tok, batch)
    for t in (1, 2, 3):
        seen, chosen = rounds(groups, t)
        rest = set(seen) - chosen
        assert min(1 - np.mean(seen[u]) for u in chosen) >= max(1 - np.mean(seen[u]) for u in rest)


def test_random_is_the_steps_uniform_draw_whatever_the_variance(model, tok, batch):
    _, groups = rollout("vigor_random", model, tok, batch, seed=5)
    tie = np.random.default_rng(5).random(8)           # round 1's draw from the step's rng
    uids = [p.uid for p in batch]
    assert rounds(groups, 1)[1] == {uids[j] for j in np.argsort(tie)[:4]}
    # over seeds, a random round passes over a higher-variance prompt for a lower one
    passed_over = False
    for seed in range(6):
        _, groups = rollout("vigor_random", model, tok, batch, seed=seed)
        seen, chosen = rounds(groups, 1)
        var = {u: bernoulli_var(r) for u, r in seen.items()}
        passed_over |= max(var[u] for u in set(var) - chosen) > min(var[u] for u in chosen)
    assert passed_over


def test_variance_rule_is_the_default(model, tok, batch):
    a, b = rollout("vigor", model, tok, batch)[1], rollout("vigor", model, tok, batch, selection="variance")[1]
    assert [(g.uid, g.rewards) for g in a] == [(g.uid, g.rewards) for g in b]


@pytest.mark.parametrize("name,config", [("vigor_graph", {"selection": "random"}),
                                         ("vigor_vsr", {"vigor": {"selection": "difficulty"}})])
def test_a_rule_the_method_would_ignore_is_refused(name, config):
    with pytest.raises(ValueError, match="selection"):
        build(name, config)
