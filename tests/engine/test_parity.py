"""Greedy completions of the embedded engine token-identical to transformers' ``generate``
on a real grouped-query model (SmolLM2-135M: 9 query heads over 3 KV heads, 30 layers),
with the engine's attention, bucketing and retire-and-compact all in play."""
from __future__ import annotations

import pytest
import torch

from components.engine.base import Request, SamplingParams
from components.engine.hf import HFEngine
from components.hf_models import stop_token_ids

NEW = 16


def reference_greedy(model, tok, ctxs: list[list[int]], new: int) -> list[list[int]]:
    """``model.generate`` greedy on the left-padded batch, cut after the first stop id."""
    stops = stop_token_ids(model, tok)
    width = max(map(len, ctxs))
    ids = torch.full((len(ctxs), width), tok.pad_token_id)
    att = torch.zeros_like(ids)
    for i, c in enumerate(ctxs):
        ids[i, width - len(c):] = torch.tensor(c)
        att[i, width - len(c):] = 1
    dev = next(model.parameters()).device
    with torch.inference_mode():
        out = model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev), do_sample=False,
                             max_new_tokens=new, eos_token_id=stops, pad_token_id=tok.pad_token_id)
    refs = []
    for row in out[:, width:].tolist():
        cut = next((j + 1 for j, t in enumerate(row) if t in stops), len(row))
        refs.append(row[:cut])
    return refs


@pytest.mark.slow
def test_smollm2_greedy_equals_generate(smollm2, math_contexts):
    model, tok = smollm2
    assert model.config.num_attention_heads > model.config.num_key_value_heads   # GQA is exercised
    torch.set_num_threads(2)
    eng = HFEngine(model, tok, compact_fraction=0.0)
    out = eng.generate([Request(tuple(c), n=2) for c in math_contexts], SamplingParams(0.0, 1.0, NEW))
    ref = reference_greedy(model, tok, math_contexts, NEW)
    for o, r in zip(out, ref):
        assert [list(c.token_ids) for c in o] == [r, r]
    rec = eng.meter.records[0]
    assert rec.prompt_tokens == sum(map(len, math_contexts)) and rec.sequences == 2 * len(math_contexts)
    assert rec.generated_tokens == 2 * sum(map(len, ref))
