"""BabyAI through minigrid: determinism, replay, the text describer, BabyAIBot experts, bad input."""
import pytest

from components.envs import Environment, make_env, replay
from components.envs.babyai import PAPER_LEVELS, BabyAIEnv, describe_view, expert_actions, parse_action


@pytest.mark.parametrize("level", PAPER_LEVELS)
def test_expert_solves_and_replay_restores_every_prefix(level):
    seed = 11
    actions = expert_actions(level, seed)
    env = BabyAIEnv(level=level)
    assert isinstance(env, Environment)
    prompts, anchors, rewards = [env.reset(seed)], [env.anchor()], []
    for a in actions:
        obs, r, done, info = env.step(f"<action>{a}</action>")
        prompts.append(obs), anchors.append(env.anchor()), rewards.append(r)
    assert done and info["won"] and 0 < rewards[-1] <= 1 and sum(rewards[:-1]) == 0
    assert anchors[0].startswith("Mission: ")
    for k in sorted({0, 1, len(actions) // 2, len(actions) - 1}):
        again, results = replay(lambda: BabyAIEnv(level=level), seed, actions[:k])
        assert again.prompt() == prompts[k] and [x.reward for x in results] == rewards[:k]


def test_same_seed_same_mission_different_seeds_differ():
    env = BabyAIEnv(level="BabyAI-OneRoomS8-v0")
    first = [env.reset(s) for s in range(8)]
    assert first == [BabyAIEnv(level="BabyAI-OneRoomS8-v0").reset(s) for s in range(8)]
    assert len(set(first)) >= 6


def test_describer_on_a_hand_built_view(hand_built_view):
    img = hand_built_view
    text = describe_view(img, 3, "pick up the red ball")
    assert text.splitlines() == [
        "Mission: pick up the red ball",
        "You face north. You carry nothing.",
        "Directly ahead: a closed blue door.",
        "Nearest wall: ahead 3 steps, left 2 steps, right not visible.",
        "You see:",
        "- a closed blue door: 1 step ahead",
        "- a red ball: 2 steps ahead, 1 step to the left",
        "- a yellow key: 6 steps ahead, 3 steps to the right",
    ]


@pytest.mark.parametrize("reply", ["fly", "", "<action>jump</action>", "turn left and go forward", 3, None])
def test_unparsable_action_is_an_invalid_move_with_penalty(reply):
    env = make_env("babyai", level="BabyAI-OneRoomS8-v0")
    env.reset(2)
    before = env.anchor()
    obs, r, done, info = env.step(reply)
    assert r == pytest.approx(-0.1) and not done and not info["action_is_valid"]
    assert env.anchor() == before and "invalid" in obs


def test_action_words_and_aliases():
    assert parse_action("<action> Turn Left. </action>") == "turn left"
    assert parse_action("pickup") == "pick up" and parse_action("forward") == "go forward"
    env = BabyAIEnv(level="BabyAI-OneRoomS8-v0", max_steps=2)
    env.reset(2)
    facing = env.anchor().splitlines()[1]
    env.step("left")
    assert env.anchor().splitlines()[1] != facing
    _, _, done, info = env.step("right")
    assert done and info["truncated"] and env.anchor().splitlines()[1] == facing


def test_unknown_level_is_one_line():
    with pytest.raises(ValueError, match="babyai: cannot make level 'BabyAI-Nope-v0'") as e:
        BabyAIEnv(level="BabyAI-Nope-v0")
    assert "\n" not in str(e.value)
