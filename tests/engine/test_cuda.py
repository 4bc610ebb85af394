"""The embedded engine on a CUDA device (``device: auto``): the same greedy ids as on the CPU.

fp32 on CUDA must give the CPU's greedy ids exactly; bf16 (what ``auto`` picks there) within
its tolerance: teacher-forced on the CPU's greedy ids, the bf16 argmax agrees wherever the
CPU's top-1 / top-2 logit margin is wider than bf16's rounding could close. Skipped, naming the
reason, where torch sees no CUDA device; ``RLVR_REQUIRE_CUDA=1`` (scripts/gpu_check.sh) makes
that a failure instead."""
from __future__ import annotations

import copy
import os

import pytest
import torch

from components.engine.base import Request, SamplingParams
from components.engine.device import place, resolve_device, resolve_dtype
from components.engine.hf import HFEngine

NO_CUDA = not torch.cuda.is_available()
if NO_CUDA and os.environ.get("RLVR_REQUIRE_CUDA"):
    raise RuntimeError("RLVR_REQUIRE_CUDA is set but torch sees no CUDA device")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(NO_CUDA, reason=f"no CUDA device (torch {torch.__version__}: "
                                                 "torch.cuda.is_available() is False)")]
NEW = 24
# bf16 keeps 8 mantissa bits: logits of size ~10-30 move by up to ~0.1-0.3 through 30 layers
BF16_MARGIN = 0.5


def _greedy(model, tok, ctxs, n=2):
    eng = HFEngine(model, tok, compact_fraction=0.0)
    return [[c.token_ids for c in cs] for cs in
            eng.generate([Request(tuple(c), n=n) for c in ctxs], SamplingParams(0.0, 1.0, NEW))]


def _tiny():
    from components.policy.model import TinyPolicyConfig, build_policy
    from components.policy.tokenizer import build_tokenizer

    tok = build_tokenizer()
    m = build_policy(TinyPolicyConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128), tok, seed=0)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.mul_(20)
    ctxs = [tok.encode(p, add_special_tokens=False) for p in ("Compute 1+2.", "C", "Compute 42+59-77+97-99.")]
    return m.eval(), tok, ctxs


def _bf16_agrees(cpu_model, gpu_model, ctxs, ids_cpu):
    """Teacher-forced on the CPU's greedy continuation: argmax equal wherever the margin is wide."""
    checked = 0
    for ctx, ids in zip(ctxs, ids_cpu):
        seq = torch.tensor([list(ctx) + list(ids[0])])
        with torch.inference_mode():
            ref = cpu_model(seq).logits[0, len(ctx) - 1:-1].float()
            got = gpu_model(seq.to(gpu_model.device)).logits[0, len(ctx) - 1:-1].float().cpu()
        top2 = ref.topk(2, dim=-1).values
        wide = (top2[:, 0] - top2[:, 1]) > BF16_MARGIN
        assert torch.equal(got.argmax(-1)[wide], ref.argmax(-1)[wide])
        checked += int(wide.sum())
    assert checked > 0


def test_auto_is_cuda_and_bf16_where_supported():
    dev = resolve_device("auto")
    assert dev.type == "cuda"
    assert resolve_dtype(dev) == (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32)


def test_tiny_policy_greedy_ids_cpu_equal_cuda():
    model, tok, ctxs = _tiny()
    cpu = _greedy(model, tok, ctxs)
    gpu32 = place(copy.deepcopy(model), "cuda", "float32")
    assert _greedy(gpu32, tok, ctxs) == cpu
    gpu = place(copy.deepcopy(model), "auto")
    _greedy(gpu, tok, ctxs)                     # runs in bf16 end to end
    _bf16_agrees(model, gpu, ctxs, cpu)


@pytest.mark.slow
def test_smollm2_greedy_ids_cpu_equal_cuda(smollm2, math_contexts):
    model, tok = smollm2
    cpu = _greedy(model, tok, math_contexts)
    gpu32 = place(copy.deepcopy(model), "cuda", "float32")
    assert _greedy(gpu32, tok, math_contexts) == cpu
    gpu = place(copy.deepcopy(model), "auto")
    _bf16_agrees(model, gpu, math_contexts, cpu)
