"""verl's rollout contract served by the embedded engine on the tiny policy: real sampling,
no Ray, no vLLM; the verl backend's tests drive the rollout engine and the trainer with it."""
from __future__ import annotations

import torch

from components.engine.base import Request, SamplingParams


def tiny_policy():
    from components.policy.model import TinyPolicyConfig, build_policy
    from components.policy.tokenizer import build_tokenizer

    tok = build_tokenizer()
    return build_policy(TinyPolicyConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128), tok, seed=0).eval(), tok


class HFGenerateSequences:
    """verl's ``generate_sequences`` contract (DataProto rows with ``context_ids`` + per-row
    ``sampling`` in; ``prompts``/``responses``/``attention_mask`` out, prompt left-, response
    right-padded) with real sampling from the tiny policy, one row at a time."""

    def __init__(self, model, tok):
        from components.engine.hf import HFEngine

        self.hf, self.pad = HFEngine(model, tok), tok.pad_token_id
        self.rows: list[tuple[int, ...]] = []
        self.calls = 0

    def __call__(self, batch):
        from verl import DataProto

        self.calls += 1
        outs = []
        for ctx, s in zip(batch.non_tensor_batch["context_ids"], batch.non_tensor_batch["sampling"]):
            sp = SamplingParams(s["temperature"], s["top_p"], s["max_tokens"], s.get("seed"))
            outs.append((tuple(ctx), self.hf.generate([Request(tuple(ctx), 1)], sp)[0][0].token_ids))
        self.rows.extend(r for _, r in outs)
        P, R = max(len(c) for c, _ in outs), int(batch.non_tensor_batch["sampling"][0]["max_tokens"])
        prompts = torch.full((len(outs), P), self.pad)
        resp = torch.full((len(outs), R), self.pad)
        att = torch.zeros((len(outs), P + R), dtype=torch.long)
        for i, (c, r) in enumerate(outs):
            prompts[i, P - len(c):] = torch.tensor(c)
            att[i, P - len(c):P] = 1
            if r:
                resp[i, :len(r)] = torch.tensor(r)
                att[i, P:P + len(r)] = 1
        return DataProto.from_dict(tensors={"prompts": prompts, "responses": resp, "attention_mask": att,
                                            "input_ids": torch.cat([prompts, resp], 1)})
