"""components/engine/linear.py: the engine's oneDNN linear layers against the model's own."""
from __future__ import annotations

import pytest
import torch

from components.engine.base import Request, SamplingParams
from components.engine.hf import HFEngine
from components.engine.linear import MIN_ROWS, available, onednn_linears
from components.policy.model import TinyPolicyConfig, build_policy
from components.policy.tokenizer import build_tokenizer

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture
def model(tok):
    return build_policy(TinyPolicyConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=256), tok, seed=3).eval()


def _linears(m):
    return [x for x in m.modules() if type(x) is torch.nn.Linear]


def test_logits_equal_the_models_own_to_float32_rounding_and_forward_restored(model, tok):
    ids = torch.randint(0, len(tok), (8, 12))
    with torch.inference_mode():
        ref = model(input_ids=ids).logits
        with onednn_linears(model) as on:
            assert on and all("forward" in vars(x) for x in _linears(model))
            ours = model(input_ids=ids).logits
    assert all("forward" not in vars(x) for x in _linears(model))
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_restored_after_an_error_and_grad_mode_keeps_f_linear(model):
    with pytest.raises(RuntimeError, match="inside"):
        with onednn_linears(model):
            raise RuntimeError("inside")
    assert all("forward" not in vars(x) for x in _linears(model))
    layer = _linears(model)[0]
    x = torch.randn(MIN_ROWS * 4, layer.in_features, requires_grad=True)
    with onednn_linears(model):
        layer(x).sum().backward()          # autograd still works: grad mode takes F.linear
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_an_update_between_calls_is_seen(model, tok):
    """The packed weights live for one call: after the weights change, the next call samples
    from the new model (here: greedy ids equal the model's own attention and linears)."""
    p = SamplingParams(temperature=0.0, max_new_tokens=12)
    reqs = [Request(tuple(tok.encode(t, add_special_tokens=False)), n=4) for t in ("Compute 1+2.", "Compute 7-3.")]
    eng = HFEngine(model, tok)
    before = eng.generate(reqs, p)
    with torch.no_grad():
        for w in model.parameters():
            if w.dim() > 1:
                w.mul_(25)      # sharp, different next-token distributions
    after = eng.generate(reqs, p)
    assert after != before
    assert after == HFEngine(model, tok, linear="model").generate(reqs, p)


def test_left_alone_where_it_does_not_apply(model):
    assert available(model)
    half = build_policy(TinyPolicyConfig(layers=1, hidden=32, heads=2, kv_heads=2, ffn=64), build_tokenizer(),
                        seed=0).to(torch.bfloat16)
    assert not available(half)
    with onednn_linears(half) as on:
        assert not on and all("forward" not in vars(x) for x in _linears(half))
    with pytest.raises(ValueError, match="linear must be"):
        HFEngine(model, build_tokenizer(), linear="mkl")
