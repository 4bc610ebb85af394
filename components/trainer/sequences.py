"""Groups -> padded training tensors, and the loss-aggregation weights.

A replayed prefix sits in ``Group.context_ids`` and so lands on the context side of
every sequence: the response mask is 1 only on generated tokens. That is the whole
"prefix tokens are masked from the loss" rule, and ``tests/trainer/test_trainer.py`` checks it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from components.methods.base import Group


@dataclass
class Sequences:
    input_ids: torch.Tensor      # [N, T] right-padded
    attention: torch.Tensor      # [N, T]
    response_mask: torch.Tensor  # [N, T] 1 on tokens that are in the loss (generated tokens)
    group_ids: list[str]         # advantage grouping key per sequence
    rewards: torch.Tensor        # [N]
    supervised: torch.Tensor     # [N] bool: NLL target instead of policy gradient

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device) -> "Sequences":
        return Sequences(self.input_ids.to(device), self.attention.to(device), self.response_mask.to(device),
                         self.group_ids, self.rewards.to(device), self.supervised.to(device))


def pad_rows(rows, pad: int, *, left: bool = False, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows -> (ids, attention) long tensors of shape [len(rows), width], each row placed
    at the start (right padding) or, with ``left``, at the end; ``width`` defaults to the longest."""
    width = max((len(r) for r in rows), default=1) if width is None else width
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        span = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, span] = torch.tensor(list(r), dtype=torch.long)
        att[i, span] = 1
    return ids, att


def build_sequences(groups: list[Group], pad_id: int) -> Sequences:
    rows, masks, gids, rewards, sup = [], [], [], [], []
    for g in groups:
        for resp, r in zip(g.responses, g.rewards):
            rows.append(list(g.context_ids) + list(resp))
            masks.append([0] * len(g.context_ids) + [1] * len(resp))
            gids.append(g.uid)
            rewards.append(float(r))
            sup.append(g.supervised)
    ids, att = pad_rows(rows, pad_id)
    msk = pad_rows(masks, 0)[0].float()
    return Sequences(ids, att, msk, gids, torch.tensor(rewards), torch.tensor(sup, dtype=torch.bool))


def token_weights(mask: torch.Tensor, mode: str, horizon: int | None = None) -> torch.Tensor:
    """Weights w such that ``(loss_mat * w).sum()`` equals verl's ``agg_loss(loss_mat, mask, mode)``.

    Lets the trainer split a batch into micro-batches (and skip sequences whose advantage
    is exactly zero) while keeping the full batch's normalisation. ``horizon`` is the
    constant of ``seq-mean-token-sum-norm`` (verl: the response length, i.e. the max new
    tokens; here our masks span context + response, so pass it explicitly).
    """
    mask = mask.float()
    n_seq = (mask.sum(-1) > 0).float().sum().clamp(min=1.0)
    if mode == "token-mean":
        return mask / mask.sum().clamp(min=1.0)
    if mode == "seq-mean-token-mean":
        return mask / (mask.sum(-1, keepdim=True) + 1e-8) / n_seq
    if mode == "seq-mean-token-sum":
        return mask / n_seq
    if mode == "seq-mean-token-sum-norm":
        return mask / n_seq / float(horizon or mask.shape[-1])
    raise ValueError(f"unknown loss_agg_mode '{mode}'")


def response_logprobs(model, input_ids: torch.Tensor, attention: torch.Tensor,
                      with_entropy: bool = False):
    """Log-prob of each token given its past ([N, T]; position 0 gets 0)."""
    logits = model(input_ids=input_ids, attention_mask=attention, use_cache=False).logits[:, :-1].float()
    logp_all = torch.log_softmax(logits, dim=-1)
    tok = torch.gather(logp_all, -1, input_ids[:, 1:, None]).squeeze(-1)
    out = torch.cat([torch.zeros_like(tok[:, :1]), tok], dim=1)
    if not with_entropy:
        return out, None
    ent = -(logp_all.exp() * logp_all).sum(-1)
    return out, torch.cat([torch.zeros_like(ent[:, :1]), ent], dim=1)
