"""Helpers shared by the stages that load a policy, generate and grade."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from components.data.schema import DataError


def set_threads(n: int | None) -> None:
    import torch

    torch.set_num_threads(n or min(2, os.cpu_count() or 1))


def load_model(model_dir: Path, device: str = "cpu", dtype: str = "auto"):
    """(model, tokenizer) from a stage artifact: ``<dir>/model``, the directory a
    ``model_ref.json`` points to (a pretrained base policy), or the dir itself; the model on
    ``device`` in ``dtype`` (``components.engine.device``: auto = bf16 on a CUDA device that
    has it, float32 otherwise)."""
    from components.engine.device import place
    from components.hf_models import model_dir_of
    from components.policy.model import load_policy

    model, tok = load_policy(model_dir_of(model_dir))
    return place(model, device, dtype), tok


def make_engine(model, tokenizer, meter):
    from components.engine.hf import HFEngine

    return HFEngine(model, tokenizer, meter=meter)


def open_engine(model_artifact: Path, meter, engine: str = "hf", device: str = "cpu"):
    """(rollout engine, tokenizer) for a model artifact. ``hf``: transformers on ``device``
    (``components.engine.device``); ``vllm``: vLLM on a GPU (the trainer image) -- the torch
    weights are then never loaded in this process, only the tokenizer."""
    from components.hf_models import load_tokenizer_any, model_dir_of

    if engine == "vllm":
        from components.engine.vllm import VLLMEngine

        d = model_dir_of(model_artifact)
        return VLLMEngine(str(d), meter=meter), load_tokenizer_any(d)
    if engine != "hf":
        raise ValueError(f"unknown engine '{engine}' (hf | vllm)")
    model, tok = load_model(model_artifact, device)
    return make_engine(model, tok, meter), tok


def grade_fn(timeout_s: float = 5.0, workers: int = 2):
    """(texts, golds) -> [(score, reason)] through the math-verify worker pool."""
    from components.reward.grader import Grader

    grader = Grader(workers=workers, timeout_s=timeout_s)

    def grade(texts: list[str], golds: list[str]) -> list[tuple[float, str]]:
        return [(g.score, g.reason) for g in grader.grade_batch(texts, golds)]

    grade.grader = grader  # type: ignore[attr-defined]
    return grade


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True))


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise DataError(f"{path}: missing")
    return json.loads(path.read_text())
