"""``keep_best: val``: the train stage outputs the checkpoint of the best validation accuracy,
names it (outputs, summary, tracker), and a resumed run keeps the best so far."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from components.data.synthetic import generate_problems
from components.stages.base import NullTracker
from components.trainer.embedded import EmbeddedTrainer
from components.trainer.train_config import TrainConfig

# validation accuracy per validation: before training, then after steps 1..5 (best: step 2;
# step 4 ties it, and the earliest is kept)
SCRIPT = [0.9, 0.2, 0.5, 0.3, 0.5, 0.4]


def parity_reward(texts, golds):
    return [(float(len(t) % 2 == 0), "rule") for t in texts]


class Scripted(EmbeddedTrainer):
    """Validation accuracies from ``SCRIPT`` (the choice is under test, not the grader)."""

    def validation_metrics(self, val_set, step):
        return {"val/accuracy": SCRIPT[step + 1]}


@pytest.fixture(scope="module")
def problems():
    return generate_problems(12, [3], seed=1)


def make(model, tok, **kw):
    cfg = TrainConfig(**{"method": "grpo", "method_config": {"n": 4}, "steps": 5, "batch_prompts": 4,
                         "max_new_tokens": 12, "lr": 1e-3, "val_size": 2, "val_samples": 1, "val_every": 1,
                         "ckpt_every": 1, "keep_best": "val", **kw})
    return Scripted(cfg, copy.deepcopy(model), tok, parity_reward, NullTracker())


def resources(problems):
    return {"expert_traces": {p.uid: p.traces[0] for p in problems}, "p0": {}}


def snapshots(t):
    seen = {}

    def on_step(step):
        seen[step + 1] = {k: v.detach().clone() for k, v in t.model.state_dict().items()}
    return seen, on_step


def assert_weights(model_dir, state):
    saved = load_file(str(model_dir / "model.safetensors"))
    assert saved and all(torch.equal(saved[k], state[k]) for k in saved)


def test_outputs_the_best_validation_checkpoint_and_names_it(model, tok, problems, tmp_path):
    t = make(model, tok)
    seen, on_step = snapshots(t)
    summary = t.fit(problems, problems[:2], resources(problems), tmp_path / "work", on_step=on_step)
    t.save_outputs(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "best.json").read_text()) == {"step": 2, "val_accuracy": 0.5}
    assert summary["kept_checkpoint"] == {"step": 2, "val_accuracy": 0.5}
    assert summary["final_val_accuracy"] == 0.4                         # the last validation is still reported
    assert_weights(tmp_path / "out" / "model", seen[2])
    assert not all(torch.equal(seen[2][k], seen[5][k]) for k in seen[2])   # and it is not the last
    assert (tmp_path / "out" / "model" / "config.json").is_file()
    assert not (tmp_path / "out" / "model" / "best.json").exists()


def test_the_choice_reaches_the_tracker(model, tok, problems, tmp_path):
    t = make(model, tok)       # NullTracker records what it is given
    t.fit(problems, problems[:2], resources(problems), tmp_path / "work")
    chosen = [(s, m) for s, m in t.tracker.metrics if "best/step" in m]
    assert chosen == [(1, {"best/step": 1.0, "best/val_accuracy": 0.2}), (2, {"best/step": 2.0, "best/val_accuracy": 0.5})]


class Crash(Exception):
    pass


def uninterrupted(model, tok, problems, work):
    """The run a crashed and resumed one must match: its best and each step's weights."""
    full = make(model, tok)
    seen, on_step = snapshots(full)
    full.fit(problems, problems[:2], resources(problems), work, on_step=on_step)
    return full, seen


def test_resume_keeps_the_best_so_far(model, tok, problems, tmp_path):
    full, seen = uninterrupted(model, tok, problems, tmp_path / "full")

    def crash(step):
        if step == 3:        # after step 4's checkpoint: the best (step 2) is two checkpoints back
            raise Crash
    first = make(model, tok)
    with pytest.raises(Crash):
        first.fit(problems, problems[:2], resources(problems), tmp_path / "crash", on_step=crash)
    resumed = make(model, tok)
    resumed.fit(problems, problems[:2], resources(problems), tmp_path / "crash")
    assert resumed.best == full.best == {"step": 2, "val_accuracy": 0.5}
    resumed.save_outputs(tmp_path / "out")
    assert_weights(tmp_path / "out" / "model", seen[2])


def test_a_crash_between_checkpoint_and_copy_is_repaired_on_resume(model, tok, problems, tmp_path):
    full, seen = uninterrupted(model, tok, problems, tmp_path / "full")

    class CrashOnCopy(Scripted):
        def best_weights(self, dst):
            if self.best["step"] == 2:
                raise Crash
            super().best_weights(dst)
    first = make(model, tok)
    first.__class__ = CrashOnCopy
    with pytest.raises(Crash):
        first.fit(problems, problems[:2], resources(problems), tmp_path / "crash")
    assert json.loads((tmp_path / "crash" / "best" / "best.json").read_text())["step"] == 1   # one behind
    resumed = make(model, tok)
    resumed.fit(problems, problems[:2], resources(problems), tmp_path / "crash")
    resumed.save_outputs(tmp_path / "out")
    assert_weights(tmp_path / "out" / "model", seen[2])


def test_default_outputs_the_last_checkpoint(model, tok, problems, tmp_path):
    t = make(model, tok, keep_best="last")
    seen, on_step = snapshots(t)
    summary = t.fit(problems, problems[:2], resources(problems), tmp_path / "work", on_step=on_step)
    t.save_outputs(tmp_path / "out")
    assert_weights(tmp_path / "out" / "model", seen[5])
    assert "kept_checkpoint" not in summary and not (tmp_path / "out" / "best.json").exists()
    assert "keep_best" not in TrainConfig().model_dump()          # existing cache keys keep their meaning


@pytest.mark.parametrize("kw", [{"val_size": 0}, {"val_every": 5, "ckpt_every": 2}])
def test_keep_best_needs_validation_at_checkpoint_steps(kw):
    with pytest.raises(ValueError, match="keep_best"):
        TrainConfig(keep_best="val", **kw)


def test_verl_keeps_the_best_steps_hf_export(tmp_path):
    """verl's side: the kept weights are the HF export of the best step's verl checkpoint, and
    the stage's model is that export, not the last step's (no Ray workers: the files only)."""
    pytest.importorskip("verl", reason="verl (the GPU backend) is not installed in this environment")
    from omegaconf import OmegaConf

    from components.engine.base import TokenMeter
    from components.methods.registry import build
    from components.trainer.verl.trainer import RLVRPPOTrainer

    t = RLVRPPOTrainer.__new__(RLVRPPOTrainer)
    t.cfg = TrainConfig(steps=3, val_every=1, ckpt_every=1, keep_best="val")
    t.config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path / "work" / "verl_checkpoints")}})
    t.meter, t.history, t.method = TokenMeter(backend="verl"), [], build("grpo", {})
    t.log_metrics = lambda row, step: None
    t.tokenizer = type("Tok", (), {"save_pretrained": lambda self, d: (Path(d) / "tokenizer.json").write_text("{}")})()
    for step in (1, 2, 3):
        hf = t._step_dir(step) / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text(json.dumps({"step": step}))
    t.global_steps, t.best = 2, {"step": 2, "val_accuracy": 0.5}
    t._keep_best()
    t.save_outputs(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "model" / "config.json").read_text()) == {"step": 2}
    assert json.loads((tmp_path / "out" / "best.json").read_text()) == {"step": 2, "val_accuracy": 0.5}
    assert not (tmp_path / "out" / "model" / "best.json").exists()
