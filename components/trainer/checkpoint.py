"""Atomic, resumable checkpoints of the embedded trainer.

A checkpoint is a directory ``step-000040/`` with the model (``save_pretrained``), the
optimizer, the method's state, the token meter, the metric history and the trainer
state. It is written under a temporary name and renamed into place (``replace_dir``), so a
crash mid-write leaves at most a ``.tmp``/``.old`` directory that is ignored and removed on
the next start.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable

import torch

PREFIX = "step-"


def latest(ckpt_root: Path) -> Path | None:
    if not ckpt_root.is_dir():
        return None
    done = sorted(p for p in ckpt_root.iterdir()
                  if p.is_dir() and p.name.startswith(PREFIX) and (p / "trainer_state.json").is_file())
    return done[-1] if done else None


def save(ckpt_root: Path, step: int, model, optimizer, scheduler, state: dict[str, Any],
         keep: int = 2) -> Path:
    from components.policy.model import quiet_hf

    quiet_hf()
    final = ckpt_root / f"{PREFIX}{step:06d}"

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp / "model", safe_serialization=True)
        torch.save({"optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict() if scheduler is not None else None},
                   tmp / "optim.pt")
        # trainer_state.json is written last: its presence marks the checkpoint complete
        with open(tmp / "trainer_state.json", "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
    replace_dir(final, fill)
    for old in sorted(p for p in ckpt_root.iterdir() if p.name.startswith(PREFIX))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def replace_dir(dst: Path, fill: Callable[[Path], None]) -> None:
    """``dst`` replaced by what ``fill`` writes into a fresh directory, renamed into place
    (a crash leaves the old ``dst`` or the new one, never half of either)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".tmp-{dst.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        fill(tmp)
        old = dst.parent / f".old-{dst.name}-{uuid.uuid4().hex[:8]}"
        if dst.exists():
            os.replace(dst, old)
        os.replace(tmp, dst)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def clean_partial(ckpt_root: Path) -> None:
    if ckpt_root.is_dir():
        for p in ckpt_root.iterdir():
            if p.name.startswith((".tmp-", ".old-")):
                shutil.rmtree(p, ignore_errors=True)


def load(path: Path, model, optimizer, scheduler) -> dict[str, Any]:
    from safetensors.torch import load_file

    weights = load_file(str(path / "model" / "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # tied embeddings are saved once; anything else missing is a real mismatch
    bad = [k for k in missing if "lm_head" not in k]
    if bad or unexpected:
        raise RuntimeError(f"{path}: checkpoint does not match the model (missing {bad[:3]}, unexpected {unexpected[:3]})")
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    # read onto the CPU whatever device wrote it: load_state_dict moves it to the parameters' device
    opt = torch.load(path / "optim.pt", weights_only=False, map_location="cpu")
    optimizer.load_state_dict(opt["optimizer"])
    if scheduler is not None and opt["scheduler"] is not None:
        scheduler.load_state_dict(opt["scheduler"])
    return json.loads((path / "trainer_state.json").read_text())
