"""The engine's linear layers on oneDNN with pre-packed weights (CPU, float32).

A decode step is a handful of small-batch matrix products per layer (a few dozen to a few
hundred rows against each weight). torch's CPU ``F.linear`` sends them to MKL's sgemm, which
re-reads the weight in its plain layout at every call; oneDNN's linear on a weight reordered
once into its blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, the kernel
inductor's CPU backend emits for frozen linears, and the one vLLM's CPU backend uses) runs
the same products faster at these shapes (``bench/engine_throughput.py --profile``: the
``engine-before`` profile keeps ``F.linear``). The results are the same products in another summation order: equal to
``F.linear`` to float32 rounding, not bit for bit.

``onednn_linears(model)`` switches a model's ``nn.Linear`` layers to it for the duration of an
engine call only (the trainer's forward/backward keeps ``F.linear``). Each weight is packed on
its first use in the call and the packed copy dropped at the end, so an update between two
calls is always seen and no second copy of the weights outlives the call (the packing is one
copy of the weights per call). Elsewhere -- a CUDA model, a dtype other than float32, a torch
without oneDNN -- the model is left as it is.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F

# rows below which MKL's call overhead is the smaller one (a single context's prefill)
MIN_ROWS = 4
# the batch size oneDNN's reorder tunes the blocked layout for; any row count runs on it
PACK_ROWS = 64


def available(model: torch.nn.Module) -> bool:
    """oneDNN's packed linear applies: a float32 model on the CPU, a torch built with oneDNN."""
    p = next(model.parameters(), None)
    return (p is not None and p.device.type == "cpu" and p.dtype == torch.float32
            and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def _forward(layer: torch.nn.Linear):
    packed: list[torch.Tensor] = []

    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.numel() < MIN_ROWS * layer.in_features or torch.is_grad_enabled():
            return F.linear(x, layer.weight, layer.bias)
        if not packed:
            packed.append(torch.ops.mkldnn._reorder_linear_weight(layer.weight.detach(), PACK_ROWS))
        return torch.ops.mkldnn._linear_pointwise(x, packed[0], layer.bias, "none", [], "")
    return forward


@contextmanager
def onednn_linears(model: torch.nn.Module) -> Iterator[bool]:
    """Inside the block every ``nn.Linear`` of ``model`` runs on oneDNN with a packed weight
    (when ``available``); each layer's own forward is restored on exit, also after an error.
    Yields whether the switch applied."""
    if not available(model):
        yield False
        return
    layers = [m for m in model.modules() if type(m) is torch.nn.Linear]
    for m in layers:
        m.forward = _forward(m)
    try:
        yield True
    finally:
        for m in layers:
            del m.forward
