"""A verl agent loop that samples from token ids, not chat messages.

verl 0.9.1 generates through agent loops (``AgentLoopManager.generate_sequences``); its
``single_turn_agent`` re-tokenizes ``raw_prompt`` chat messages. Our contexts are token ids
already (the prompt, plus a replayed prefix for VSR), so this loop sends
``context_ids`` to the vLLM server as they are and applies the per-row ``sampling``
overrides the rollout engine set (max_tokens, seed, temperature, top_p). The reward is
computed on the driver by the method's grader, so ``reward_score`` is set to 0.0 here to keep
verl's reward workers out of the rollout (``_compute_score`` skips a scored output).

Loaded in verl's agent-loop workers from ``agent_loops.yaml`` (Hydra ``_target_``).
"""
from __future__ import annotations

from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.utils.profiler import simple_timer


class ContextIdsAgentLoop(AgentLoopBase):
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
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
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=response, response_mask=[1] * len(response),
            response_logprobs=logprobs, reward_score=0.0, num_turns=2,
            metrics=AgentLoopMetrics(generate_sequences=timing.get("generate_sequences", 0.0),
                                     num_preempted=out.num_preempted if out.num_preempted is not None else -1),
            extra_fields={"turn_scores": [], "tool_rewards": []})
