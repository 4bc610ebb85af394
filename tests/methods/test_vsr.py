"""VSR's buffer, score and sampling rules (the VSR paper; docs/methods.md §4)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from components.methods.base import Group
from components.methods.registry import available, build
from components.methods.vsr import Trajectory, sigma_hat
from components.policy.tokenizer import build_tokenizer


@pytest.mark.parametrize("alpha,p,sigma", [(0.0, 0.1, 0.3), (0.25, 0.325, 0.468375), (0.5, 0.55, 0.497494),
                                           (0.75, 0.775, 0.417582)])
def test_score_matches_methods_md_vector(alpha, p, sigma):
    # docs/methods.md §4 TV: p0 = 0.1, R = 1
    assert sigma_hat(0.1, alpha) == pytest.approx(sigma, abs=1e-6)
    assert sigma_hat(0.1, alpha) == pytest.approx(math.sqrt(p * (1 - p)), abs=1e-12)


def group(uid, rewards, responses, step_ctx=(1, 2), prefix=()):
    return Group(uid=uid, problem_uid=uid.split("@")[0], answer="0", context_ids=tuple(step_ctx) + tuple(prefix),
                 prompt_len=len(step_ctx), responses=[tuple(r) for r in responses], texts=["" for _ in responses],
                 rewards=list(rewards))


def test_buffer_keeps_only_the_latest_success_per_prompt_and_updates_p0():
    v = build("vsr", {"window_steps": 3, "expert_seed": False})
    v.tokenizer = build_tokenizer()
    v.step = 0
    v.observe([group("a", [0, 0], [[5, 6], [7, 8]])])
    assert v.buffer == {} and v.p0["a"] == 0.0                     # failures never enter
    v.step = 1
    v.observe([group("a", [1, 0, 1], [[5, 6, 7], [9], [8, 8, 8, 8]])])
    assert v.buffer["a"].response_ids == [8, 8, 8, 8] and v.p0["a"] == pytest.approx(2 / 3)
    v.step = 2
    v.observe([group("a@2", [1], [[4, 4]], prefix=(3, 3))])        # a replay success: not a fresh trajectory
    assert v.buffer["a"].response_ids == [8, 8, 8, 8] and v.buffer["a"].inserted_step == 1
    assert v.p0["a"] == pytest.approx(2 / 3)                        # p0 comes from fresh groups only
    v.step = 4
    v.observe([])
    assert v.buffer == {}                                           # evicted by the recency window


def test_insert_from_replay_stores_prefix_plus_continuation():
    v = build("vsr", {"window_steps": 3, "expert_seed": False, "insert_from_replay": True})
    v.tokenizer, v.step = build_tokenizer(), 2
    v.observe([group("a@2", [1], [[4, 4]], prefix=(3, 3))])
    assert v.buffer["a"].response_ids == [3, 3, 4, 4] and v.buffer["a"].inserted_step == 2


def test_token_level_states_by_default_and_a_stride_grid():
    v = build("vsr", {})
    v.buffer = {"a": Trajectory("a", list(range(6)), 0, "policy"), "b": Trajectory("b", [1], 0, "policy")}
    v.p0 = {"a": 0.0}
    assert [s[1] for s in v.prefix_states()] == [1, 2, 3, 4, 5]     # s_i = (x, y_<i), every i; "b" has none
    assert [s[1] for s in v.prefix_states()] == v.cut_positions(v.buffer["a"])
    assert [round(s[2], 6) for s in v.prefix_states()][:2] == [round(sigma_hat(0.0, 1 / 6), 6), round(sigma_hat(0.0, 2 / 6), 6)]
    g = build("vsr", {"cut_stride": 2})
    g.buffer = v.buffer
    assert [s[1] for s in g.prefix_states()] == [2, 4] == g.cut_positions(g.buffer["a"])


def test_draws_with_replacement_unless_told_otherwise():
    v = build("vsr", {"cut_points": "fractions", "cut_fractions": [0.5]})
    v.buffer = {"a": Trajectory("a", list(range(8)), 0, "expert")}
    rng = np.random.default_rng(0)
    assert [s[1] for s in v.select_replays(3, rng)] == [4, 4, 4]    # one state, drawn three times
    w = build("vsr", {"cut_points": "fractions", "cut_fractions": [0.5], "replacement": False})
    w.buffer = v.buffer
    assert [s[1] for s in w.select_replays(3, rng)] == [4]


def test_ablation_knobs():
    tok = build_tokenizer()
    static = build("vsr", {"online_insert": False, "scoring": "uniform"})
    static.tokenizer, static.step = tok, 100
    static.buffer["a"] = Trajectory("a", [1] * 8, 0, "expert")
    static.observe([group("b", [1], [[5, 5]])])
    assert set(static.buffer) == {"a"}                               # static pool: never changes
    assert {s[2] for s in static.prefix_states()} == {1.0}           # uniform scores
    frozen = build("vsr", {"freeze_after": 2, "window_steps": 1})
    frozen.tokenizer, frozen.step = tok, 2
    frozen.buffer["a"] = Trajectory("a", [1] * 8, 0, "expert")
    frozen.observe([group("b", [1], [[5, 5]])])
    assert set(frozen.buffer) == {"a"}                               # frozen: no insert, no eviction


def test_sampling_is_proportional_to_sigma_hat():
    v = build("vsr", {"cut_points": "fractions", "cut_fractions": [0.25, 0.75]})
    v.tokenizer = build_tokenizer()
    v.buffer = {"a": Trajectory("a", list(range(8)), 0, "expert")}
    v.p0 = {"a": 0.1}
    states = v.prefix_states()
    assert [(s[1], round(s[2], 6)) for s in states] == [(2, 0.468375), (6, 0.417582)]
    rng = np.random.default_rng(0)
    picks = [v.select_replays(1, rng)[0][1] for _ in range(4000)]
    share = picks.count(2) / len(picks)
    assert share == pytest.approx(0.468375 / (0.468375 + 0.417582), abs=0.03)


def test_state_dict_round_trip_and_registry():
    assert {"grpo", "vsr", "sft"} <= set(available())
    v = build("vsr", {})
    v.buffer = {"a": Trajectory("a", [1, 2, 3], 4, "policy")}
    v.p0, v.step = {"a": 0.25}, 7
    w = build("vsr", {})
    w.load_state_dict(v.state_dict())
    assert w.state_dict() == v.state_dict()
    with pytest.raises(Exception, match="rho"):
        build("vsr", {"rho": 1.5})
    with pytest.raises(KeyError, match="unknown method"):
        build("nope", {})


@pytest.mark.parametrize("cfg,knob", [({"cut_fractions": [0.5]}, "cut_fractions"),
                                      ({"cut_points": "fractions", "cut_stride": 2}, "cut_stride")])
def test_a_knob_of_another_cut_rule_is_refused(cfg, knob):
    with pytest.raises(ValueError, match=f"{knob} applies to cut_points"):
        build("vsr", cfg)
