"""components/engine/attention.py: the CPU decode step's attention against SDPA."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from components.engine.attention import _decode_attention, gqa_attention


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("mask_kind", ["bool", "additive", "none"])
def test_decode_attention_equals_sdpa_with_repeated_kv(groups, mask_kind):
    g = torch.Generator().manual_seed(groups)
    b, hkv, s, d = 5, 2, 17, 8
    q = torch.randn(b, hkv * groups, 1, d, generator=g)
    k, v = torch.randn(b, hkv, s, d, generator=g), torch.randn(b, hkv, s, d, generator=g)
    attend = torch.ones(b, 1, 1, s, dtype=torch.bool)
    attend[0, ..., :6] = False                     # left padding of different widths
    attend[3, ..., :2] = False
    mask = {"bool": attend, "none": None,
            "additive": torch.zeros(b, 1, 1, s).masked_fill(~attend, float("-inf"))}[mask_kind]
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                          attn_mask=mask)
    got, _ = gqa_attention(torch.nn.Module(), q, k, v, mask)
    torch.testing.assert_close(got, want.transpose(1, 2), rtol=1e-5, atol=1e-6)
    # the reserved cache hands attention a view with spare capacity along the sequence axis
    spare_k, spare_v = torch.zeros(b, hkv, s + 9, d), torch.zeros(b, hkv, s + 9, d)
    spare_k[:, :, :s], spare_v[:, :, :s] = k, v
    view = _decode_attention(q.reshape(b, hkv, groups, d), spare_k[:, :, :s], spare_v[:, :, :s], mask, d ** -0.5)
    torch.testing.assert_close(view.reshape(b, 1, hkv * groups, d), want.transpose(1, 2), rtol=1e-5, atol=1e-6)

