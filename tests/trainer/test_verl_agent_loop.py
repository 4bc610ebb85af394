"""The multi-turn verl agent loop, offline: a real tiny model behind the server's ``generate``
(verl's vLLM server needs Ray and a GPU-sized setup; the loop's token bookkeeping does not)."""
from __future__ import annotations

import aio
from types import SimpleNamespace

import pytest
from tiny import TINY_TEST_POLICY

from components.agentic.policy import build_agent_tokenizer
from components.trainer.verl.agent_loop import run_episode, token_advantages
from components.engine.base import Request, SamplingParams
from components.engine.hf import HFEngine
from components.envs import replay
from components.envs.sokoban import SokobanEnv
from components.policy.model import TinyPolicyConfig, build_policy

CHAT = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<eos>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def make():
    return SokobanEnv(num_boxes=1, max_steps=4, template="compact")


@pytest.fixture(scope="module")
def setup():
    tok = build_agent_tokenizer(max_positions=1024)
    model = build_policy(TinyPolicyConfig(**{**TINY_TEST_POLICY, "max_positions": 1024}), tok, seed=2)
    eng = HFEngine(model, tok)

    async def generate(ids, params):
        (c,), = eng.generate([Request(tuple(ids))], SamplingParams(1.0, 1.0, int(params["max_tokens"]),
                                                                   seed=len(ids)))
        return list(c.token_ids), [-1.0] * len(c.token_ids)
    return tok, generate


def play(setup, template="raw", prefix=(), response_length=600):
    tok, generate = setup
    return aio.run(run_episode(generate, tok, make, 3, prefix, response_length=response_length,
                                   sampling_params={"max_tokens": 6}, template=template))


def check_layout(ep, tok):
    mask = ep.response_mask
    assert len(mask) == len(ep.response_ids) == len(ep.logprobs)
    in_reply = [0] * len(mask)
    for a, b in ep.spans:
        in_reply[a:b] = [1] * (b - a)
    assert mask == in_reply                      # exactly the sampled reply tokens are trainable
    obs = tok.decode([t for t, m in zip(ep.response_ids, mask) if m == 0])
    n_obs = obs.count("Current observation")
    assert n_obs == len(ep.spans) - 1 or (ep.truncated and n_obs == len(ep.spans))
    assert all(lp == 0.0 for lp, m in zip(ep.logprobs, mask) if m == 0)


def test_raw_episode_masks_observations_and_replays(setup):
    tok = setup[0]
    ep = play(setup)
    check_layout(ep, tok)
    assert len(ep.spans) == 4 and not ep.truncated       # max_steps turns (random weights never win)
    assert tok.decode(ep.prompt_ids) == make().reset(3)
    env, _ = replay(make, 3, ep.actions[:2])
    assert ep.anchors[2] == env.anchor()


def test_replayed_prefix_is_prompt_context(setup):
    tok = setup[0]
    ep = play(setup, prefix=("up", "left"))
    check_layout(ep, tok)
    text = tok.decode(ep.prompt_ids)
    assert text.count("Current observation") == 2 and len(ep.spans) == 2   # 2 of 4 turns replayed
    env, _ = replay(make, 3, ["up", "left"])
    assert ep.anchors[0] == env.anchor()


def test_chat_template_and_truncation(setup):
    tok = setup[0]
    tok.chat_template = CHAT
    try:
        ep = play(setup, template="chat")
        check_layout(ep, tok)
        assert tok.decode(ep.prompt_ids).startswith("<|user|>") and tok.decode(ep.prompt_ids).endswith("<|assistant|>")
        obs = tok.decode(ep.response_ids[ep.spans[0][1]:ep.spans[1][0]])
        assert "<|user|>Reward:" in obs and obs.endswith("<|assistant|>")
        short = play(setup, template="chat", response_length=60)
        assert short.truncated and len(short.response_ids) <= 60
        check_layout(short, tok)
    finally:
        tok.chat_template = None


def test_token_advantages_follow_reply_spans():
    assert token_advantages([(0, 2), (5, 6)], [1.5, -1.0], 8) == [1.5, 1.5, 0, 0, 0, -1.0, 0, 0]
    with pytest.raises(ValueError, match="2 reply spans but 1"):
        token_advantages([(0, 1), (2, 3)], [1.0], 4)


def test_verl_agent_loop_class_runs_an_episode(setup):
    pytest.importorskip("verl", reason="verl is installed in .venv-scale only")
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

    from components.trainer.verl.agent_loop import EpisodeAgentLoop

    tok, generate = setup
    assert issubclass(EpisodeAgentLoop, AgentLoopBase)

    class Server:   # the server manager's interface, a real model behind it
        async def generate(self, request_id, prompt_ids, sampling_params, priority=0):
            ids, lps = await generate(prompt_ids, sampling_params)
            return SimpleNamespace(token_ids=ids, log_probs=lps, num_preempted=0)

    loop = object.__new__(EpisodeAgentLoop)     # verl's __init__ needs a trainer config and workers
    loop.server_manager, loop.tokenizer = Server(), tok
    loop.rollout_config = SimpleNamespace(response_length=600)
    out = aio.run(loop.run({"max_tokens": 6}, env={"env": "sokoban", "config": {"num_boxes": 1, "max_steps": 3, "template": "compact"}},
                               map_seed=5, template="raw"))
    ep = out.extra_fields["episode"]
    assert isinstance(out, AgentLoopOutput) and sum(out.response_mask) == sum(b - a for a, b in ep["spans"])
    assert out.reward_score == float(ep["won"]) and len(ep["turn_rewards"]) == 3 and len(ep["valid"]) == 3
