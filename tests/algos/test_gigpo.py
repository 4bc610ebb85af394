"""GiGPO advantages against hand-computed examples (docs/methods.md §11)."""
import math

import pytest

from components.algos.gigpo import Episode, discounted_returns, gigpo_advantages


def approx(rows):
    return [pytest.approx(r, abs=1e-9) for r in rows]


def test_discounted_returns_by_hand():
    assert discounted_returns([1.0, 0.0, 2.0], 0.5) == pytest.approx([1 + 0.25 * 2, 0.5 * 2, 2.0])
    assert discounted_returns([-0.1, -0.1, 10.9], 1.0) == pytest.approx([10.7, 10.8, 10.9])


def test_no_two_observations_match_step_advantage_is_zero():
    eps = [Episode("g", ["a0", "a1"], [0.0, 1.0]), Episode("g", ["b0"], [-1.0])]
    out = gigpo_advantages(eps, gamma=0.9)
    assert out.step == [[0.0, 0.0], [0.0]]
    assert out.step_group_sizes == [[1, 1], [1]]
    # returns 1 and -1; verl-agent's default averages over step rows: (1 + 1 - 1) / 3 = 1/3
    assert out.episode == approx([[2 / 3, 2 / 3], [-4 / 3]])
    assert out.advantages == out.episode
    # the paper's per-episode mean: (1 - 1) / 2 = 0
    per_episode = gigpo_advantages(eps, episode_stats="episodes")
    assert per_episode.advantages == approx([[1.0, 1.0], [-1.0]])
    # std normalisation over rows [1, 1, -1]: unbiased variance (4/9 + 4/9 + 16/9) / 2 = 4/3
    std = math.sqrt(4 / 3)
    normed = gigpo_advantages(eps, mode="mean_std_norm")
    assert normed.advantages == approx([[(2 / 3) / (std + 1e-6)] * 2, [(-4 / 3) / (std + 1e-6)]])


def _three_episodes():
    # s0 is shared by all three episodes, s1 by the first two; s2, s3, s4 are seen once
    return [Episode("g", ["s0", "s1", "s2"], [0.0, 0.0, 10.0]),
            Episode("g", ["s0", "s1", "s3"], [0.0, 0.0, 0.0]),
            Episode("g", ["s0", "s4"], [-1.0, 1.0])]


def test_repeated_anchor_states_form_step_groups():
    out = gigpo_advantages(_three_episodes(), gamma=0.5)
    # discounted returns: ep1 [2.5, 5, 10], ep2 [0, 0, 0], ep3 [-0.5, 1]
    m0 = (2.5 + 0 - 0.5) / 3
    m1 = (5 + 0) / 2
    assert out.step == approx([[2.5 - m0, 5 - m1, 0.0], [0 - m0, 0 - m1, 0.0], [-0.5 - m0, 0.0]])
    assert out.step_group_sizes == [[3, 2, 1], [3, 2, 1], [3, 1]]
    # episode returns 10, 0, 0 over 3 + 3 + 2 step rows: mean 30 / 8
    e = [10 - 3.75, 0 - 3.75, 0 - 3.75]
    assert out.episode == approx([[e[0]] * 3, [e[1]] * 3, [e[2]] * 2])
    assert out.advantages == approx([[x + y for x, y in zip(a, b)] for a, b in zip(out.episode, out.step)])
    half = gigpo_advantages(_three_episodes(), gamma=0.5, step_weight=0.5)
    assert half.advantages[0][1] == pytest.approx(e[0] + 0.5 * (5 - m1))
    assert gigpo_advantages(_three_episodes(), step_weight=0.0).advantages == out.episode


def test_step_groups_std_normalised():
    out = gigpo_advantages(_three_episodes(), gamma=0.5, mode="mean_std_norm")
    m0 = 2 / 3
    s0 = math.sqrt(((2.5 - m0) ** 2 + m0 ** 2 + (0.5 + m0) ** 2) / 2)
    s1 = math.sqrt((2.5 ** 2 + 2.5 ** 2) / 1)
    assert out.step[0][0] == pytest.approx((2.5 - m0) / (s0 + 1e-6))
    assert out.step[1][1] == pytest.approx(-2.5 / (s1 + 1e-6))
    assert out.step[0][2] == 0.0 and out.step[2][1] == 0.0


def test_revisited_state_in_one_episode_and_groups_do_not_mix():
    # g: one episode visits a twice; h: a different map that also has an anchor "a"
    eps = [Episode("g", ["a", "b", "a"], [1.0, 0.0, 2.0]), Episode("h", ["a"], [5.0])]
    out = gigpo_advantages(eps, gamma=1.0)
    # returns in g: [3, 2, 2]; step group a = {3, 2}, mean 2.5; b alone
    assert out.step == approx([[0.5, 0.0, -0.5], [0.0]])
    assert out.step_group_sizes == [[2, 1, 2], [1]]
    # g has one episode over 3 rows: the mean is its own return; h has a single row: mean 0, std 1
    assert out.episode == approx([[0.0] * 3, [5.0]])
    assert gigpo_advantages(eps, mode="mean_std_norm").episode[1] == approx([5.0 / (1 + 1e-6)])


def test_identical_returns_give_zero_even_with_std():
    eps = [Episode(7, [(1, 2), (1, 3)], [0.0, 1.0]), Episode(7, [(1, 2), (1, 3)], [0.0, 1.0])]
    out = gigpo_advantages(eps, mode="mean_std_norm")
    assert out.advantages == [[0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("eps,kw,match", [
    ([Episode("g", ["a"], [1.0, 2.0])], {}, "episode 0 has 1 anchors but 2 rewards"),
    ([Episode("g", [], [])], {}, "episode 0 has no steps"),
    ([Episode("g", ["a"], [float("nan")])], {}, "episode 0 step 0 reward is nan"),
    ([Episode("g", ["a"], [1.0])], {"mode": "std"}, "mode must be one of"),
    ([], {}, "no episodes"),
])
def test_bad_input_raises(eps, kw, match):
    with pytest.raises(ValueError, match=match):
        gigpo_advantages(eps, **kw)


def test_unhashable_anchor_names_episode_and_step():
    with pytest.raises(TypeError, match="episode 0 step 1 anchor is not hashable"):
        gigpo_advantages([Episode("g", ["a", ["b"]], [0.0, 1.0])])
