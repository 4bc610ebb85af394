"""Episodes <-> verl ``DataProto``: the requests the verl trainer sends to
``agent_loop.EpisodeAgentLoop`` and the training rows it builds from what comes back. Pure
(needs verl's ``DataProto``, no Ray, no workers), so it is tested offline.

Requests: one row per episode (a ``Start``'s ``n`` episodes adjacent, starts in order), all in
``non_tensor_batch`` (verl's agent-loop workers pass those to ``run`` as kwargs); a per-episode
sampling seed from (step seed, start, episode) with the math engine's ``sample_seed``.

Training rows, by layout:

* ``turns``: one row per generated turn, prompt = that turn's context ids (the environment's
  prompt: instruction, history, observation), response = the reply. This is the embedded
  trainer's ``turn_rows``, so GiGPO's advantages are the embedded trainer's, number for number.
* ``serialized``: one row per episode as the agent loop returned it (observations inside the
  response with ``response_mask`` 0); each turn's advantage is spread over its reply tokens
  (``agent_loop.token_advantages``) and is 0 on observation tokens and padding.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from components.agentic.rollout import EpisodeRun, Start, TurnRecord
from components.engine.base import SamplingParams
from components.trainer.verl.rollout import object_array, row_sampling

__all__ = ["AGENT_LOOP_NAME", "episode_requests", "runs_from_output", "turn_training_rows",
           "serialized_training_rows"]

AGENT_LOOP_NAME = "rlvr_episode"
ROW_KEYS = ("prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids")


def episode_requests(starts: Sequence[Start], env_spec: dict[str, Any], sampling: SamplingParams, *,
                     layout: str, template: str, max_prompt_length: int):
    from verl import DataProto

    rows: list[dict[str, Any]] = []
    for si, s in enumerate(starts):
        for j in range(s.n):
            rows.append({"env": dict(env_spec), "map_seed": int(s.seed), "prefix": list(s.prefix),
                         "layout": layout, "template": template, "max_prompt_length": int(max_prompt_length),
                         "sampling": row_sampling(sampling, si, j), "row": len(rows)})
    if not rows:
        raise ValueError("episode_requests: no episodes to play")
    non_tensors = {key: object_array([r[key] for r in rows]) for key in rows[0]}
    non_tensors["agent_name"] = np.array([AGENT_LOOP_NAME] * len(rows), dtype=object)
    # verl's postprocess copies raw_prompt through; ours is the environment
    non_tensors["raw_prompt"] = object_array([[] for _ in rows])
    return DataProto.from_dict(tensors={"row_index": torch.arange(len(rows))}, non_tensors=non_tensors)


def runs_from_output(out, starts: Sequence[Start]) -> list[EpisodeRun]:
    """The agent loop's episodes as the embedded rollout's ``EpisodeRun``s (start order)."""
    episodes = out.non_tensor_batch["episode"]
    want = sum(s.n for s in starts)
    if len(episodes) != want:
        raise RuntimeError(f"agent loop returned {len(episodes)} episodes for {want} requested")
    runs, k = [], 0
    for s in starts:
        for _ in range(s.n):
            ep = episodes[k]
            if int(ep["row"]) != k:
                raise RuntimeError(f"agent loop: row {k} came back as row {ep['row']} (order lost)")
            runs.append(_run_of(s, ep, out.batch["responses"][k] if ep["layout"] == "serialized" else None))
            k += 1
    return runs


def _run_of(start: Start, ep: dict, response: torch.Tensor | None) -> EpisodeRun:
    if ep["layout"] == "turns":
        turns = [TurnRecord(tuple(t["context_ids"]), tuple(t["response_ids"]), t["text"], float(t["reward"]),
                            t["anchor"], bool(t["valid"]), t["finish_reason"]) for t in ep["turns"]]
        return EpisodeRun(start, turns, won=bool(ep["won"]), done=bool(ep["done"]))
    ids = response.tolist()
    turns = [TurnRecord((), tuple(ids[a:b]), act, float(r), anc, bool(v), "stop")
             for (a, b), act, r, anc, v in zip(ep["spans"], ep["actions"], ep["turn_rewards"], ep["anchors"],
                                              ep["valid"])]
    return EpisodeRun(start, turns, won=bool(ep["won"]), done=not ep["truncated"])


def turn_training_rows(groups, pad_id: int, response_length: int):
    """``turn_rows`` groups (one turn each, advantage in ``meta``) -> DataProto with
    ``advantages`` on the reply tokens."""
    from components.trainer.verl.dataproto import groups_to_dataproto

    data = groups_to_dataproto(groups, pad_id, response_length=response_length)
    adv = torch.tensor([g.meta["advantages"][0] for g in groups], dtype=torch.float32)
    data.batch["advantages"] = adv[:, None] * data.batch["response_mask"].float()
    return data


def serialized_training_rows(out, runs: Sequence[EpisodeRun], turn_advantages: Sequence[Sequence[float]]):
    """The agent loop's rows as they came back, ``advantages`` per reply token."""
    from verl import DataProto

    from components.trainer.verl.agent_loop import token_advantages

    R = out.batch["responses"].shape[1]
    spans = [ep["spans"] for ep in out.non_tensor_batch["episode"]]
    adv = torch.tensor([token_advantages([tuple(x) for x in sp], a, R) for sp, a in zip(spans, turn_advantages)],
                       dtype=torch.float32).reshape(len(spans), R)
    mask = out.batch["response_mask"].float()
    if ((adv != 0) & (mask == 0)).any():
        raise RuntimeError("serialized rows: an advantage fell on a masked (observation) token")
    data = DataProto.from_dict(tensors={k: out.batch[k] for k in ROW_KEYS},
                               non_tensors={"uid": np.array([r.start.group_id() for r in runs], dtype=object)})
    data.batch["advantages"] = adv * mask
    return data
