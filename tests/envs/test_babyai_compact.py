"""BabyAI's compact encoding (``template: compact``) for the character-level policy, and the
BabyAIBot behaviour-cloning expert (``solver_action``)."""
import pytest

from components.envs import make_env, replay
from components.envs.babyai import COLOUR_CODE, KIND_CODE, describe_compact, describe_view, expert_actions

ONE_ROOM = "BabyAI-OneRoomS8-v0"


def test_compact_on_a_hand_built_view(hand_built_view):
    img = hand_built_view
    assert describe_compact(img, 3).splitlines() == ["N- bdc w3,2,?", "bdc@1,0", "ro@2,-1", "yk@6,3"]
    carried = type("Ball", (), {"type": "ball", "color": "purple"})()
    assert describe_compact(img, 0, carried).splitlines()[0] == "Epo bdc w3,2,?"


def _decoded(compact: str) -> list[tuple[str, str, int, int]]:
    """(colour, kind, forward, lateral) of each object line of a compact state."""
    kinds = {v: k for k, v in KIND_CODE.items()}
    colours = {v: k for k, v in COLOUR_CODE.items()}
    out = []
    for line in compact.splitlines()[1:]:
        code, pos = line.split("@")
        fwd, lat = (int(v) for v in pos.split(","))
        out.append((colours[code[0]], kinds[code[1]], fwd, lat))
    return out


def _described(text: str) -> list[tuple[str, str, int, int]]:
    """The same from the describer's "You see" lines ("- a red ball: 2 steps ahead, ...")."""
    out = []
    for line in text.splitlines():
        if not line.startswith("- "):
            continue
        what, where = line[2:].split(": ")
        colour, kind = what.split()[-2:]
        fwd = lat = 0
        for part in where.split(", "):
            n = int(part.split()[0])
            if part.endswith("ahead"):
                fwd = n
            else:
                lat = n if part.endswith("right") else -n
        out.append((colour, kind, fwd, lat))
    return out


@pytest.mark.parametrize("level", [ONE_ROOM, "BabyAI-SynthLoc-v0"])
def test_compact_state_holds_the_describers_objects_and_walls(level):
    for seed in range(4):
        actions = expert_actions(level, seed)
        env, _ = replay(lambda: make_env("babyai", level=level, template="compact"), seed, actions[:-1])
        full = env.anchor()                              # GiGPO's anchor stays the full text
        compact = env.state_text()
        assert full.startswith("Mission: ") and not compact.startswith("Mission")
        assert _decoded(compact) == _described(full) and len(compact) < len(full)
        walls = full.splitlines()[3]
        nums = [w.split()[0] if w.split()[0].isdigit() else "?" for w in
                walls.replace("Nearest wall: ", "").rstrip(".").replace("ahead ", "").replace("left ", "")
                .replace("right ", "").split(", ")]
        assert compact.splitlines()[0].split(" w")[1] == ",".join(nums)


def test_compact_prompt_fits_the_tiny_policy_with_two_turns_of_history():
    from components.agentic.policy import build_agent_tokenizer

    tok = build_agent_tokenizer(max_positions=192)
    longest = 0
    for seed in range(5):
        env = make_env("babyai", level=ONE_ROOM, template="compact", history_turns=2)
        prompt = env.reset(seed)
        mission = prompt.splitlines()[0]
        assert mission == env._obs["mission"] and prompt.endswith("\n>")
        for a in expert_actions(ONE_ROOM, seed):
            longest = max(longest, len(tok.encode(env.prompt())))
            prompt, _, _, _ = env.step(a)
        assert prompt.count(mission) == 1                 # the mission once, not per history turn
    # 8 reply tokens after it: inside the tiny policy's 192 positions
    assert longest + 8 <= 192, longest


def test_synthloc_prompt_with_one_turn_of_history_fits_agentic_babyai_positions():
    """agentic_babyai.yaml's regime: SynthLoc, history_turns 1, policy max_positions 256."""
    from pathlib import Path

    import yaml

    from components.agentic.policy import build_agent_tokenizer

    sweep = yaml.safe_load((Path(__file__).parents[2] / "dags/sweeps/agentic_babyai.yaml").read_text())
    env_config = sweep["stages"]["prepare_data"]["env_config"]
    positions = sweep["stages"]["pretrain"]["policy"]["max_positions"]
    reply = sweep["max_response_tokens"]
    tok = build_agent_tokenizer(max_positions=4096)
    longest = 0
    for seed in range(6):
        env = make_env("babyai", **env_config)
        env.reset(seed)
        for a in expert_actions(env_config["level"], seed)[: env.max_steps]:
            longest = max(longest, len(tok.encode(env.prompt())))
            env.step(a)
    assert longest + reply <= positions, (longest, positions)


def test_bot_expert_clones_and_recovers_from_random_moves():
    from components.agentic.bc import demonstrations

    def make():
        return make_env("babyai", level=ONE_ROOM, template="compact")

    clean, stats = demonstrations(make, list(range(12)), noise=0.0)
    assert stats["demo_success"] == 1.0
    assert {d.answer for d in clean} <= {"turn left", "turn right", "go forward", "pick up"}
    _, noisy = demonstrations(make, list(range(12)), noise=0.3, seed=1)
    assert noisy["demo_success"] >= 0.75 and noisy["demo_turns"] > stats["demo_turns"]
    env = make()
    env.reset(3)
    env.step("go forward")                               # a move the bot did not suggest ...
    env.step("turn left")
    assert env.solver_action() is not None              # ... then asked mid-episode: rebuilt from here
