"""``device: auto`` resolution on whatever this machine has, and its one-line errors."""
from __future__ import annotations

import pytest
import torch

from components.engine.device import place, resolve_device, resolve_dtype


def test_auto_follows_torch_and_cpu_stays_fp32():
    dev = resolve_device("auto")
    assert dev.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype(torch.device("cpu")) == torch.float32
    assert resolve_dtype(torch.device("cpu"), "bfloat16") == torch.bfloat16


def test_bad_specs_raise():
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="dtype must be"):
        resolve_dtype(torch.device("cpu"), "fp8")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            resolve_device("cuda")


def test_place_casts():
    m = place(torch.nn.Linear(2, 2), "cpu", "bfloat16")
    assert m.weight.dtype == torch.bfloat16 and m.weight.device.type == "cpu"
