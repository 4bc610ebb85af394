"""A multi-turn verl agent loop that drives a text environment (verl 0.9.1 ``AgentLoopBase``).

One call of :meth:`EpisodeAgentLoop.run` plays one episode as one serialized trajectory, the
paper's representation ("a serialized interaction history consisting of the task instruction,
previous actions, environment feedback, and current observations"; seed 000, appendix D):

    prompt_ids   = instruction + first observation  [+ replayed turns, for a VSR replay state]
    response_ids = reply_1 obs_1 reply_2 obs_2 ... reply_K
    response_mask=   1...1 0..0   1...1 0..0  ...   1...1

Replies are the model's sampled ids as the server returned them (mask 1, the only tokens in the
loss); every observation the environment returns after a reply (its reward, the new state, the
answer format) is tokenised into the response with mask 0, so it is context for the next reply
and never trained on. A VSR replay state (``prefix``: the first i actions of a successful
episode, restored by replaying the environment from its map seed) goes entirely into
``prompt_ids``: prefix tokens are context, as in math. The episode ends when the environment
says so (solved, failed, ``max_steps``) or when the next reply could not fit in
``response_length`` (then ``truncated``).

``template``: ``"chat"`` wraps observations as user turns of the tokenizer's chat template
(Qwen2.5-Instruct in the paper's runs; the template must render a conversation as a prefix of
its continuation, which ChatML does), ``"raw"`` concatenates plain text (the tiny policy).

GiGPO on one serialized row: :func:`token_advantages` spreads each turn's advantage (A^E +
omega A^S from ``extra_fields``: per-turn rewards and anchors) over that turn's reply tokens.

The pure part (:func:`run_episode`) needs no verl and is tested offline with a real model
behind ``generate``; the ``AgentLoopBase`` subclass is defined only when verl imports.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

__all__ = ["EpisodeTokens", "run_episode", "observation_text", "token_advantages",
           "train_agentic_with_verl"]

Generate = Callable[[list[int], dict], Awaitable[tuple[list[int], list[float] | None]]]


@dataclass
class EpisodeTokens:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)   # reply t = response_ids[a:b]
    rewards: list[float] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    won: bool = False
    truncated: bool = False


def observation_text(env, reward: float) -> str:
    """What the environment says after a reply: the reward, the new state, the answer format."""
    state = env.state_text() if hasattr(env, "state_text") else env.anchor()
    return (f"Reward: {reward:+.1f}. Current observation (step {env.steps + 1}):\n{state}\n"
            f"Admissible actions: {', '.join(env.admissible_actions())}. "
            "Answer with one action inside <action></action>.")


class _Serializer:
    """Token ids for the first prompt, a replayed reply and an observation, raw or chat."""

    def __init__(self, tokenizer, template: str):
        if template not in ("raw", "chat"):
            raise ValueError(f"agent loop: template must be 'raw' or 'chat', got {template!r}")
        self.tok, self.template = tokenizer, template
        if template == "chat":
            conv = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
            base = tokenizer.apply_chat_template(conv, tokenize=False)
            full = tokenizer.apply_chat_template(conv + [{"role": "user", "content": "OBS"}], tokenize=False,
                                                 add_generation_prompt=True)
            if not full.startswith(base) or "OBS" not in full[len(base):]:
                raise ValueError("agent loop: the chat template does not render a conversation as a prefix "
                                 "of its continuation; use template: raw")
            eos = tokenizer.eos_token or ""
            # what the template writes after a reply's end token (ChatML: a newline), then the user turn
            tail = base[base.rfind(eos) + len(eos):] if eos and eos in base else ""
            self.before, self.after = (tail + full[len(base):]).split("OBS")
            self.eos_text = eos

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def first(self, prompt: str) -> list[int]:
        if self.template == "raw":
            return self.encode(prompt)
        return self.encode(self.tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                        add_generation_prompt=True))

    def reply(self, text: str) -> list[int]:
        """A replayed reply as context (re-tokenised: its sampled ids are not stored)."""
        return self.encode(text + (self.eos_text if self.template == "chat" else ""))

    def observation(self, text: str, reply_ids: Sequence[int]) -> list[int]:
        if self.template == "raw":
            return self.encode("\n" + text + "\n")
        closed = bool(reply_ids) and self.tok.decode(list(reply_ids[-1:])) == self.eos_text
        return self.encode(("" if closed else self.eos_text) + self.before + text + self.after)


async def run_episode(generate: Generate, tokenizer, make_env: Callable, seed: int, prefix: Sequence[str] = (),
                      *, response_length: int, sampling_params: dict | None = None,
                      template: str = "chat") -> EpisodeTokens:
    ser = _Serializer(tokenizer, template)
    env = make_env()
    ids = ser.first(env.reset(seed))
    for i, a in enumerate(prefix):           # a VSR replay state: context, in the prompt
        if env.done:
            raise ValueError(f"agent loop: replayed prefix of seed {seed} ended at action {i} of {len(prefix)}")
        _, r, _, _ = env.step(a)
        ids += ser.reply(a)
        if not env.done:
            ids += ser.observation(observation_text(env, r), ser.reply(a))
    if env.done:
        raise ValueError(f"agent loop: replayed prefix of seed {seed} ends the episode")
    ep = EpisodeTokens(prompt_ids=ids)
    params = dict(sampling_params or {})
    while not env.done:
        room = response_length - len(ep.response_ids)
        if room <= 0:
            ep.truncated = True
            break
        out_ids, lps = await generate(ep.prompt_ids + ep.response_ids, {**params, "max_tokens": min(
            int(params.get("max_tokens", room)), room)})
        out_ids = list(out_ids)[:room]
        start = len(ep.response_ids)
        ep.response_ids += out_ids
        ep.response_mask += [1] * len(out_ids)
        if ep.logprobs is not None:
            ep.logprobs = ep.logprobs + list(lps)[:len(out_ids)] if lps else None
        ep.spans.append((start, len(ep.response_ids)))
        text = tokenizer.decode(out_ids, skip_special_tokens=True)
        ep.anchors.append(env.anchor())
        _, r, done, info = env.step(text)
        ep.rewards.append(float(r))
        ep.actions.append(text)
        ep.won = bool(info["won"])
        if not done:
            obs = ser.observation(observation_text(env, r), out_ids)
            if len(ep.response_ids) + len(obs) >= response_length:
                ep.truncated = True
                break
            ep.response_ids += obs
            ep.response_mask += [0] * len(obs)
            if ep.logprobs is not None:
                ep.logprobs = ep.logprobs + [0.0] * len(obs)
    return ep


def token_advantages(spans: Sequence[tuple[int, int]], turn_advantages: Sequence[float], length: int) -> list[float]:
    """Per response token: the advantage of the turn whose reply it belongs to, 0 elsewhere
    (observation tokens, padding)."""
    if len(spans) != len(turn_advantages):
        raise ValueError(f"token_advantages: {len(spans)} reply spans but {len(turn_advantages)} advantages")
    out = [0.0] * length
    for (a, b), adv in zip(spans, turn_advantages):
        if not 0 <= a <= b <= length:
            raise ValueError(f"token_advantages: span {(a, b)} outside a response of {length} tokens")
        out[a:b] = [float(adv)] * (b - a)
    return out


def train_agentic_with_verl(params, ctx) -> dict:
    """The agentic train stage on verl: not wired yet (see the module docstring for what exists)."""
    raise NotImplementedError(
        "train (task: agentic, backend: verl): the verl trainer does not yet drive episodes. What exists: "
        "components/agentic/verl_loop.py (multi-turn AgentLoopBase, observation tokens masked, tested "
        "offline); what is missing: a verl trainer loop that sends EpisodeAgentLoop requests (map seed, "
        "replayed prefix) and applies token_advantages before update_actor. Use backend: embedded.")


try:   # verl is installed in the scale environment only
    from uuid import uuid4

    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
except ImportError:   # pragma: no cover - exercised where verl is missing
    AgentLoopBase = None

if AgentLoopBase is not None:
    class EpisodeAgentLoop(AgentLoopBase):
        """kwargs per row: ``env`` ({"env": name, "config": {...}}), ``map_seed``, optional ``prefix``
        (replayed actions), ``template`` ("chat" default) and ``sampling`` overrides."""

        async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
            from components.agentic.stages.common import env_factory

            async def generate(prompt_ids, params):
                out = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=prompt_ids,
                                                         sampling_params=params)
                return list(out.token_ids), (list(out.log_probs) if out.log_probs else None)

            ep = await run_episode(generate, self.tokenizer, env_factory(kwargs["env"]), int(kwargs["map_seed"]),
                                   tuple(kwargs.get("prefix") or ()),
                                   response_length=int(self.rollout_config.response_length),
                                   sampling_params={**sampling_params, **dict(kwargs.get("sampling") or {})},
                                   template=kwargs.get("template", "chat"))
            return AgentLoopOutput(
                prompt_ids=ep.prompt_ids, response_ids=ep.response_ids, response_mask=ep.response_mask,
                response_logprobs=ep.logprobs or None, reward_score=float(ep.won), num_turns=2 * len(ep.spans) + 1,
                metrics=AgentLoopMetrics(), extra_fields={
                    "turn_rewards": ep.rewards, "anchors": ep.anchors, "spans": ep.spans, "won": ep.won,
                    "actions": ep.actions, "truncated": ep.truncated})

    __all__.append("EpisodeAgentLoop")
