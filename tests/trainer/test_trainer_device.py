"""Where the embedded trainer and the engine stages run (``device``): the default keeps every
cache key and reference record; ``cuda`` without a device fails at start; on a CUDA device
(tests marked ``cuda``, skipped naming the reason without one) the update, the per-token
methods and a resume from a checkpoint written there run."""
from __future__ import annotations

import copy
import os

import pytest
import torch

from components.stages.base import NullTracker
from components.trainer.embedded import EmbeddedTrainer
from components.trainer.train_config import TrainConfig

from components.data.synthetic import generate_problems

NO_CUDA = not torch.cuda.is_available()
if NO_CUDA and os.environ.get("RLVR_REQUIRE_CUDA"):
    raise RuntimeError("RLVR_REQUIRE_CUDA is set but torch sees no CUDA device")
needs_cuda = [pytest.mark.cuda, pytest.mark.skipif(NO_CUDA, reason=f"no CUDA device (torch {torch.__version__}: "
                                                                    "torch.cuda.is_available() is False)")]


@pytest.mark.parametrize("stage", ["train", "evaluate", "filter_hard"])
def test_the_default_device_is_left_out_of_the_cache_key(stage):
    import importlib

    params = importlib.import_module(f"components.stages.{stage}").Params
    assert "device" not in params().model_dump()
    assert params(device="auto").model_dump()["device"] == "auto"


@pytest.mark.skipif(not NO_CUDA, reason="a CUDA device is present: nothing to refuse")
def test_cuda_without_a_device_fails_at_start(model, tok, tmp_path):
    from components.stages.common import load_model

    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    with pytest.raises(RuntimeError, match="torch sees no CUDA device"):
        load_model(tmp_path, "cuda")
    placed, _ = load_model(tmp_path, "auto")                 # auto: the CPU here, float32
    assert next(placed.parameters()).device.type == "cpu"
    assert next(placed.parameters()).dtype == torch.float32


def parity_reward(texts, golds):
    """1 for an even number of characters: mixed groups from an untrained policy."""
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


@pytest.fixture(scope="module")
def problems():
    return generate_problems(12, [3], seed=1)


def resources(problems):
    return {"expert_traces": {p.uid: p.traces[0] for p in problems}, "p0": {}}


def _teacher(model):
    """A policy that disagrees with ``model`` (PG-OPD's advantages are their log-prob gaps)."""
    teacher, g = copy.deepcopy(model), torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return teacher


def _trainer(model, tok, device, **kw):
    cfg = TrainConfig(**{"steps": 3, "batch_prompts": 4, "max_new_tokens": 16, "val_size": 4, "val_samples": 1,
                         "ckpt_every": 2, "val_every": 2, "lr": 1e-3, **kw})
    return EmbeddedTrainer(cfg, copy.deepcopy(model).to(device), tok, parity_reward, NullTracker())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("method", ["grpo", "rl_zvp", "pg_opd"])
def test_the_update_runs_on_the_device_and_resumes_on_the_cpu(method, device, model, tok, problems, tmp_path):
    cfg = {"n": 4, "teacher_path": None} if method == "pg_opd" else {"n": 4}
    res = {**resources(problems), "teacher": _teacher(model).to(device)} if method == "pg_opd" else resources(problems)
    t = _trainer(model, tok, device, method=method, method_config=cfg)
    t.fit(problems, problems[:4], res, tmp_path / "run")
    assert all(p.device.type == device for p in t.model.parameters())
    losses = [r["train/loss"] for r in t.history if "train/loss" in r]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(a.cpu(), b) for a, b in zip(t.model.parameters(), model.parameters()))
    # a checkpoint written on the device resumes on the CPU (its optimizer state read onto the CPU)
    cpu = _trainer(model, tok, "cpu", method=method, method_config=cfg, steps=4)
    cpu.fit(problems, problems[:4], res, tmp_path / "run")
    assert [r["step"] for r in cpu.history if "train/loss" in r] == [1, 2, 3, 4]
