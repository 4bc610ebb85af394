"""verl's agent-loop plug-ins for our rollouts (verl 0.9.1 ``AgentLoopBase``), registered in
``agent_loops.yaml`` and loaded by verl's agent-loop workers (Hydra ``_target_``).

``ContextIdsAgentLoop`` (``rlvr_context_ids``, math): one sample from token ids. verl's
``single_turn_agent`` re-tokenizes ``raw_prompt`` chat messages; our contexts are token ids
already (the prompt, plus a replayed prefix for VSR), so ``context_ids`` go to the vLLM server
as they are, with the per-row ``sampling`` overrides the rollout engine set (max_tokens, seed,
temperature, top_p).

``EpisodeAgentLoop`` (``rlvr_episode``, multi-turn): one episode against a text environment,
in one of two layouts (``layout``):

``turns`` (:func:`play_turns`): every turn's context is the environment's own prompt
(instruction + the last turns of history + current state, ``env.prompt()``), exactly what the
embedded rollout (``components.agentic.rollout``) sends and what verl-agent trains on; each
generated turn becomes one training row on the driver (``episodes.turn_training_rows``),
its prompt on the context side, so no observation token is ever in a response. The row's
tensors carry the first turn; the whole episode travels in ``extra_fields['episode']``.

``serialized`` (:func:`run_episode`): the episode as one serialized trajectory, the
paper's representation ("a serialized interaction history consisting of the task instruction,
previous actions, environment feedback, and current observations"; the VSR paper, appendix D):

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

Rewards are computed on the driver (the method's grader, the episode's outcome), so
``reward_score`` is only carried through; verl's reward workers skip a scored output.

The pure parts (:func:`run_episode`, :func:`play_turns`) need no verl and are tested offline
with a real model behind ``generate``; the ``AgentLoopBase`` subclasses are defined only where
verl imports.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

__all__ = ["EpisodeTokens", "run_episode", "play_turns", "observation_text", "token_advantages",
           "LAYOUTS"]

LAYOUTS = ("turns", "serialized")
TURN_SEED_STRIDE = 7_919    # the embedded rollout's per-turn sampling seed stride

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
    valid: list[bool] = field(default_factory=list)
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
        ep.valid.append(bool(info["action_is_valid"]))
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


async def play_turns(generate: Generate, tokenizer, make_env: Callable, seed: int, prefix: Sequence[str] = (),
                     *, sampling_params: dict, template: str = "raw", max_prompt_length: int) -> dict[str, Any]:
    """One episode, each turn prompted with the environment's own prompt (layout ``turns``).

    The sampling seed of turn t is ``seed + 7919 t`` (the embedded rollout's stride). A turn's
    prompt longer than ``max_prompt_length`` tokens raises: verl would left-truncate it.
    Returns ``{"turns": [...], "won", "done"}``; a turn holds its context and reply ids, the
    reply text, reward, anchor state, whether the action parsed, and ``finish_reason``."""
    from components.agentic.rollout import prompt_encoder
    from components.envs.base import EnvError

    encode = prompt_encoder(tokenizer, template)
    eos = tokenizer.eos_token_id
    env = make_env()
    env.reset(seed)
    for i, a in enumerate(prefix):             # a VSR replay state: replayed, not generated
        if env.done:
            raise EnvError(f"{env.name}: replayed prefix of seed {seed} ended at action {i} of {len(prefix)}")
        env.step(a)
    if env.done:
        raise EnvError(f"{env.name}: replayed prefix of seed {seed} ({len(prefix)} actions) ends the episode")
    turns: list[dict[str, Any]] = []
    won = False
    base_seed = sampling_params.get("seed")
    while not env.done:
        context = list(encode(env.prompt()))
        if len(context) > max_prompt_length:
            raise ValueError(f"agent loop: the turn-{len(turns)} prompt of map seed {seed} has {len(context)} "
                             f"tokens, above max_prompt_length {max_prompt_length}")
        params = dict(sampling_params)
        if base_seed is not None:
            params["seed"] = (int(base_seed) + TURN_SEED_STRIDE * len(turns)) % 2**32
        ids, _ = await generate(context, params)
        ids = [int(t) for t in ids]
        text = tokenizer.decode(ids, skip_special_tokens=True)
        anchor = env.anchor()
        _, reward, _, info = env.step(text)
        turns.append({"context_ids": context, "response_ids": ids, "text": text, "reward": float(reward),
                      "anchor": anchor, "valid": bool(info["action_is_valid"]),
                      "finish_reason": "stop" if ids and ids[-1] == eos else "length"})
        won = bool(info["won"])
    return {"turns": turns, "won": won, "done": True}


try:   # verl is installed in the scale environment only
    from uuid import uuid4

    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
except ImportError:   # pragma: no cover - exercised where verl is missing
    AgentLoopBase = None

if AgentLoopBase is not None:
    class ContextIdsAgentLoop(AgentLoopBase):
        """kwargs per row: ``context_ids`` (the prompt's token ids) and ``sampling`` overrides."""

        async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
            from verl.utils.profiler import simple_timer

            prompt_ids = [int(t) for t in kwargs["context_ids"]]
            params = {**sampling_params, **dict(kwargs.get("sampling") or {})}
            response_length = int(self.rollout_config.response_length)
            timing: dict[str, float] = {}
            with simple_timer("generate_sequences", timing):
                out = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=prompt_ids,
                                                         sampling_params=params,
                                                         priority=int(kwargs.get("priority", 0)))
            response = list(out.token_ids)[:response_length]
            logprobs = list(out.log_probs)[:response_length] if out.log_probs else None
            preempted = out.num_preempted if out.num_preempted is not None else -1
            return AgentLoopOutput(
                prompt_ids=prompt_ids, response_ids=response, response_mask=[1] * len(response),
                response_logprobs=logprobs, reward_score=0.0, num_turns=2,
                metrics=AgentLoopMetrics(generate_sequences=timing.get("generate_sequences", 0.0),
                                         num_preempted=preempted),
                extra_fields={"turn_scores": [], "tool_rewards": []})

    class EpisodeAgentLoop(AgentLoopBase):
        """kwargs per row: ``env`` ({"env": name, "config": {...}}), ``map_seed``, optional ``prefix``
        (replayed actions), ``layout`` ("turns" | "serialized"), ``template`` ("raw" | "chat"),
        ``max_prompt_length`` (turns) and ``sampling`` overrides (max_tokens = tokens per turn).

        Everything the driver needs is one dict, ``extra_fields['episode']`` (verl passes each
        extra field through as a per-row object array, ``non_tensor_batch['episode']``); its
        ``row`` lets the driver check that rows come back in the order they were sent."""

        async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
            import time

            from components.envs.spec import env_factory

            async def generate(prompt_ids, params):
                out = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=prompt_ids,
                                                         sampling_params=params,
                                                         priority=int(kwargs.get("priority", 0)))
                return list(out.token_ids), (list(out.log_probs) if out.log_probs else None)

            layout = kwargs.get("layout", "serialized")
            if layout not in LAYOUTS:
                raise ValueError(f"agent loop: layout must be one of {LAYOUTS}, got {layout!r}")
            params = {**sampling_params, **dict(kwargs.get("sampling") or {})}
            make, seed, prefix = env_factory(kwargs["env"]), int(kwargs["map_seed"]), tuple(kwargs.get("prefix") or ())
            t0 = time.monotonic()
            if layout == "turns":
                ep = await play_turns(generate, self.tokenizer, make, seed, prefix, sampling_params=params,
                                      template=kwargs.get("template", "raw"),
                                      max_prompt_length=int(kwargs["max_prompt_length"]))
                first = ep["turns"][0]
                return AgentLoopOutput(
                    prompt_ids=first["context_ids"], response_ids=first["response_ids"],
                    response_mask=[1] * len(first["response_ids"]), reward_score=float(ep["won"]),
                    num_turns=2 * len(ep["turns"]) + 1,
                    metrics=AgentLoopMetrics(generate_sequences=time.monotonic() - t0),
                    extra_fields={"episode": {"layout": "turns", "row": int(kwargs.get("row", -1)), **ep}})
            ser = await run_episode(generate, self.tokenizer, make, seed, prefix,
                                    response_length=int(self.rollout_config.response_length),
                                    sampling_params=params, template=kwargs.get("template", "chat"))
            return AgentLoopOutput(
                prompt_ids=ser.prompt_ids, response_ids=ser.response_ids, response_mask=ser.response_mask,
                response_logprobs=ser.logprobs or None, reward_score=float(ser.won),
                num_turns=2 * len(ser.spans) + 1,
                metrics=AgentLoopMetrics(generate_sequences=time.monotonic() - t0),
                extra_fields={"episode": {
                    "layout": "serialized", "row": int(kwargs.get("row", -1)), "turn_rewards": ser.rewards,
                    "anchors": ser.anchors, "spans": [list(x) for x in ser.spans], "won": ser.won,
                    "actions": ser.actions, "valid": ser.valid, "truncated": ser.truncated}})

    __all__ += ["ContextIdsAgentLoop", "EpisodeAgentLoop"]
