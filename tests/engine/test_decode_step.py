"""DecodeStep: the engine's decode step as direct tensor operations gives the logits of
``model(...)`` bit for bit (a padded and an unpadded batch, oneDNN linears on and off), on the
tiny policy with and without grouped-query heads and on SmolLM2; and where it would not
compute what the model does it is not used."""
from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

from components.engine.attention import engine_attention
from components.engine.base import Request, SamplingParams
from components.engine.decode import DecodeStep
from components.engine.hf import HFEngine
from components.engine.linear import onednn_linears
from components.policy.model import TinyPolicyConfig, build_policy
from components.policy.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _tiny(tok, kv_heads: int):
    m = build_policy(TinyPolicyConfig(layers=2, hidden=64, heads=4, kv_heads=kv_heads, ffn=128), tok, seed=3)
    with torch.no_grad():
        for p in m.parameters():      # varied, peaked logits (a fresh init is near uniform)
            p.mul_(4)
    return m.eval()


def _both_steps(model, tok, contexts, onednn: bool, steps: int = 3):
    """Logits of ``steps`` decode steps through ``model(...)`` and through DecodeStep, each from
    its own prefill of ``contexts`` (2 samples each), feeding both the same greedy tokens."""
    eng = HFEngine(model, tok)
    lin = onednn_linears(model) if onednn else nullcontext(False)
    with torch.inference_mode(), engine_attention(model), lin as applied:
        assert applied == onednn
        fast = DecodeStep.of(model)
        assert fast is not None
        out = []
        for use_fast in (False, True):
            logits, cache, mask, pos = eng._prefill(contexts, torch.device("cpu"))
            rows = torch.arange(len(contexts)).repeat_interleave(2)
            cache.batch_select_indices(rows)
            logits, mask, pos = logits[rows], mask[rows], pos[rows] + 1
            seen = []
            for _ in range(steps):
                tok_ids = logits.argmax(-1)
                mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
                if use_fast:
                    logits = fast.step(tok_ids, mask, pos, cache)
                else:
                    logits = model(input_ids=tok_ids[:, None], attention_mask=mask, position_ids=pos[:, None],
                                   past_key_values=cache, use_cache=True).logits[:, -1, :]
                pos = pos + 1
                seen.append(logits.clone())
            out.append(seen)
    return out


@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("onednn", [True, False])
def test_tiny_logits_equal_the_models_bit_for_bit(tok, kv_heads, onednn):
    model = _tiny(tok, kv_heads)
    enc = [tuple(tok.encode(p, add_special_tokens=False)) for p in ("Compute 1+2.", "C", "Compute 42+59-77+97-99.")]
    padded = _both_steps(model, tok, enc, onednn)
    even = _both_steps(model, tok, [enc[0], enc[0]], onednn)    # no padding: the unmasked path
    for ref, fast in (padded, even):
        for a, b in zip(ref, fast):
            assert torch.equal(a, b), (a - b).abs().max()


def test_engine_samples_the_same_with_and_without_it(tok):
    model = _tiny(tok, 2)
    reqs = [Request(tuple(tok.encode(p, add_special_tokens=False)), n=4) for p in ("Compute 1+2.", "C", "Compute 5-3+2.")]
    p = SamplingParams(temperature=1.0, max_new_tokens=30, seed=5)
    assert HFEngine(model, tok).generate(reqs, p) == HFEngine(model, tok, decode="model").generate(reqs, p)


def test_not_used_where_it_would_not_compute_the_models_step(tok):
    model = _tiny(tok, 2)
    with engine_attention(model):
        assert DecodeStep.of(model) is not None
        model.config.hidden_act = "gelu"
        try:
            assert DecodeStep.of(model) is None
        finally:
            model.config.hidden_act = "silu"
    assert DecodeStep.of(model) is None          # the model's own sdpa, outside an engine call
    hook = model.lm_head.register_forward_hook(lambda m, i, o: o)
    try:
        with engine_attention(model):
            assert DecodeStep.of(model) is None  # it would skip the hook
    finally:
        hook.remove()
    with pytest.raises(ValueError, match="decode"):
        HFEngine(model, tok, decode="fast")


@pytest.mark.slow
def test_smollm2_logits_equal_the_models_bit_for_bit(smollm2, math_contexts):
    model, tok = smollm2
    torch.set_num_threads(2)
    ref, fast = _both_steps(model, tok, math_contexts[:3], onednn=True, steps=2)
    for a, b in zip(ref, fast):
        assert torch.equal(a, b), (a - b).abs().max()
