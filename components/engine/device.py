"""Where the embedded engine runs: ``device: auto`` and the dtype that is safe there.

``auto`` is CUDA when torch sees a device, else the CPU. bfloat16 only on a CUDA device that
supports it: there the matmuls run at tensor-core rate and bf16's range equals fp32's, so
logits do not overflow; sampling still takes its softmax in float32 (``hf._sample``). On the
CPU float32 stays the default: bf16 matmuls are slower than fp32 on CPUs without AMX, and the
tests' token-identity with ``model.generate`` is an fp32 statement.
"""
from __future__ import annotations

import torch

DEVICES = ("auto", "cpu", "cuda")
DTYPES = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(spec: str = "auto") -> torch.device:
    """``auto`` -> cuda:0 when available, else cpu; ``cuda`` without a device raises."""
    if spec not in DEVICES and not spec.startswith("cuda:"):
        raise ValueError(f"device must be one of {', '.join(DEVICES)} or cuda:<index>, got {spec!r}")
    if spec == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {spec!r}: torch sees no CUDA device (torch {torch.__version__})")
    return torch.device(spec)


def resolve_dtype(device: torch.device, spec: str = "auto") -> torch.dtype:
    """``auto``: bfloat16 on a CUDA device that supports it, float32 otherwise."""
    if spec not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {spec!r}")
    if DTYPES[spec] is not None:
        return DTYPES[spec]
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def place(model: torch.nn.Module, device: str = "auto", dtype: str = "auto") -> torch.nn.Module:
    """``model`` moved to the resolved device and cast to the resolved dtype (in place)."""
    dev = resolve_device(device)
    return model.to(device=dev, dtype=resolve_dtype(dev, dtype))
