"""Groups -> verl ``DataProto``, and the advantages verl computes on it.

verl's batch layout (``ray_trainer.fit``, the agent loop's ``_postprocess``): ``prompts``
left-padded to P, ``responses`` right-padded to R, ``input_ids = prompts ++ responses``,
``attention_mask`` over both, ``position_ids = cumsum(attention_mask) - 1``, and
``response_mask`` [N, R]. A replayed prefix is part of ``Group.context_ids``, so it lands
on the prompt side and its tokens are never in ``response_mask``: the same "prefix is
context" rule as the embedded trainer's ``build_sequences``. The outcome reward sits at
the last response token of ``token_level_scores`` (verl's reward managers put it there),
and ``non_tensor_batch['uid']`` is the group id that verl's estimators group by.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from components.methods.base import Group, Method, advantage_terms
from components.trainer.sequences import pad_rows


def groups_to_dataproto(groups: Sequence[Group], pad_id: int, response_length: int | None = None):
    """One row per sample of every group. ``response_length`` fixes R (verl's
    ``max_response_length``); by default R is the longest response of the batch."""
    from verl import DataProto

    rows = [(g, resp, r) for g in groups for resp, r in zip(g.responses, g.rewards)]
    if not rows:
        raise ValueError("groups_to_dataproto: no samples in the groups")
    longest = max(len(resp) for _, resp, _ in rows)
    R = longest if response_length is None else int(response_length)
    if longest > R:
        raise ValueError(f"groups_to_dataproto: a response has {longest} tokens > response_length {R}")
    prompts, p_att = pad_rows([g.context_ids for g, _, _ in rows], pad_id, left=True)
    responses, r_att = pad_rows([resp for _, resp, _ in rows], pad_id, width=R)
    scores = torch.zeros((len(rows), R), dtype=torch.float32)
    for i, (_, resp, reward) in enumerate(rows):
        if resp:
            scores[i, len(resp) - 1] = float(reward)
    attention = torch.cat([p_att, r_att], dim=1)
    tensors = {
        "prompts": prompts, "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention,
        "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
        "response_mask": r_att.clone(),
        "token_level_scores": scores,
        "token_level_rewards": scores.clone(),
    }
    non_tensor = {
        "uid": np.array([g.uid for g, _, _ in rows], dtype=object),
        "problem_uid": np.array([g.problem_uid for g, _, _ in rows], dtype=object),
        "prompt_len": np.array([g.prompt_len for g, _, _ in rows], dtype=np.int64),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensor)


def verl_advantages(data, estimator: str) -> torch.Tensor:
    """Token-level advantages [N, R] from verl's own ``core_algos`` with ``uid`` grouping
    (what ``ray_trainer.compute_advantage`` does for our three estimators)."""
    from verl.trainer.ppo import core_algos

    kw = dict(token_level_rewards=data.batch["token_level_rewards"],
              response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"])
    if estimator == "rloo":
        adv, _ = core_algos.compute_rloo_outcome_advantage(**kw)
    elif estimator in ("grpo", "drgrpo"):
        adv, _ = core_algos.compute_grpo_outcome_advantage(**kw, norm_adv_by_std_in_grpo=(estimator == "grpo"))
    else:
        raise ValueError(f"unknown adv_estimator '{estimator}' (grpo | drgrpo | rloo)")
    return adv


def apply_method_advantages(data, method: Method, groups: Sequence[Group]) -> None:
    """A method's own advantage terms on top of verl's (the embedded trainer's rules): its
    exact per-sample advantages (``sample_advantages``) replace the estimator's, and its
    ``advantage_weight`` scales a group's. In place on ``data.batch['advantages']``."""
    fixed, weight = advantage_terms(method, groups)
    fixed = torch.tensor(fixed, dtype=torch.float32)
    weight = torch.tensor(weight, dtype=torch.float32)
    if len(fixed) != len(data):
        raise ValueError(f"apply_method_advantages: {len(fixed)} samples in the groups, {len(data)} rows")
    mask = data.batch["response_mask"].float()
    adv = data.batch["advantages"]
    adv = torch.where(torch.isnan(fixed)[:, None], adv, fixed[:, None] * mask) * weight[:, None]
    data.batch["advantages"] = adv * mask
