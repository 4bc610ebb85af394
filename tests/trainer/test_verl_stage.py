"""The verl backend's trainer, train stage, CLI and scripts without Ray workers: the trainer
class on verl's, one run of the shared loop with its hooks, the backend field's cache keys,
``rlvr train-verl``'s argument checks, the smoke scripts, model registration and refusals."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

from components.engine.base import TokenMeter
from components.trainer.train_config import TrainConfig
from verl_generate import HFGenerateSequences, tiny_policy

ROOT = Path(__file__).resolve().parents[2]
torch.set_num_threads(2)


@pytest.fixture(scope="module")
def tiny():
    return tiny_policy()


def test_trainer_module_imports_and_subclasses_verls_trainer():
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from components.trainer.verl.trainer import RLVRPPOTrainer, _collate, _Indices

    assert issubclass(RLVRPPOTrainer, RayPPOTrainer)
    assert RLVRPPOTrainer._update_actor is not RayPPOTrainer._update_actor
    loader = torch.utils.data.DataLoader(_Indices(5), batch_size=2, drop_last=True, collate_fn=_collate)
    assert [b["index"].tolist() for b in loader] == [[0, 1], [2, 3]]


def test_verl_trainer_runs_the_shared_loop_with_its_hooks(tiny, tmp_path):
    """The loop on the verl trainer with the parts that need Ray workers replaced: the actor
    update and verl's own checkpoint files (``tests/scale`` runs them for real). Rollouts go
    through the real ``VerlRolloutEngine``. Checks the hook order verl needs (replicas sleep
    after the rollout, get the new weights after the update), the embedded trainer's metric
    names, and a resume from the loop state saved beside verl's checkpoint."""
    from omegaconf import OmegaConf

    from components.data.schema import Problem
    from components.methods.registry import build
    from components.trainer.verl.trainer import STATE_FILE, RLVRPPOTrainer

    model, tok = tiny
    events: list[tuple] = []

    class Replicas:
        def sleep_replicas(self):
            events.append(("sleep",))

        def update_weights(self, step):
            events.append(("weights", step))

    class Logger:
        def log(self, data, step):
            events.append(("log", step))

    class WorkerlessTrainer(RLVRPPOTrainer):
        def update(self, groups):                     # verl's actor update needs workers
            events.append(("update", self.global_steps, sum(g.n for g in groups)))
            return {"actor/pg_loss": 0.0, "pad_rows": 0.0}

        def _save_checkpoint(self):                   # verl's files: its tracker names the step
            (Path(self.config.trainer.default_local_dir) / "latest").write_text(str(self.global_steps))

        def _load_checkpoint(self):
            f = Path(self.config.trainer.default_local_dir) / "latest"
            self.global_steps = int(f.read_text()) if f.exists() else 0

    def make(steps):
        t = WorkerlessTrainer.__new__(WorkerlessTrainer)
        t.cfg = TrainConfig(method="grpo", method_config={"n": 2}, steps=steps, batch_prompts=2, max_new_tokens=6,
                            val_size=2, val_samples=1, val_every=2, ckpt_every=1, seed=1)
        t.config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path / "ckpt")},
                                     "actor_rollout_ref": {"rollout": {"agent": {"num_workers": 2}}}})
        t.tokenizer, t.meter, t.history = tok, TokenMeter(backend="verl"), []
        t.method = build("grpo", {"n": 2})
        t.async_rollout_manager = type("M", (), {"generate_sequences": HFGenerateSequences(model, tok)})()
        t.checkpoint_manager, t.logger, t.grade = Replicas(), Logger(), lambda texts, golds: [(1.0, "x")] * len(texts)
        return t

    probs = [Problem(uid=f"u{i}", prompt=f"Compute {i}+1.", answer=str(i + 1)) for i in range(4)]
    first = make(2)
    first.run_loop(probs, probs[:2], {}, tok)
    assert events[:2] == [("weights", 0), ("log", 0)]                  # restore, then validation at step 0
    assert events[2:6] == [("sleep",), ("update", 1, 4), ("weights", 1), ("log", 1)]
    assert events[6:10] == [("sleep",), ("update", 2, 4), ("weights", 2), ("log", 2)]
    state = json.loads((tmp_path / "ckpt" / "global_step_2" / STATE_FILE).read_text())
    assert state["step"] == 2 and state["history"] == first.history
    rows = [h for h in first.history if "train/actor/pg_loss" in h]
    assert [r["step"] for r in rows] == [1, 2] and all(r["rollouts"] == 4 for r in rows)
    assert {"reward/mean", "val/accuracy", "val/clip_ratio", "tokens/generated", "train/pad_rows"} <= set(
        k for h in first.history for k in h)
    events.clear()
    resumed = make(3)                                                  # the same run, one step longer
    resumed.run_loop(probs, probs[:2], {}, tok)
    assert events[0] == ("weights", 2) and [e for e in events if e[0] == "update"] == [("update", 3, 4)]
    assert resumed.history[:len(first.history)] == first.history
    assert resumed.summary()["backend"] == "verl" and resumed.summary()["steps"] == 3


def test_train_stage_backend_field_keeps_embedded_cache_keys():
    from components import lineage
    from components.stages import train

    for kw in ({}, {"method": "vsr", "steps": 5, "method_config": {"rho": 0.25}}, {"threads": 2}):
        dump = train.Params(**kw).model_dump(mode="json")
        # embedded params dump as TrainConfig + backend + threads: the verl-only fields change neither
        # the dict nor the cache key of an embedded run
        before = {**TrainConfig(**{k: v for k, v in kw.items() if k != "threads"}).model_dump(mode="json"),
                  "backend": "embedded", "threads": kw.get("threads")}
        assert dump == before
        assert lineage.cache_key("train", 1, dump, {}, "c") == lineage.cache_key("train", 1, before, {}, "c")
    v = train.Params(backend="verl", n_gpus_per_node=4, verl_overrides=("trainer.nnodes=2",))
    d = v.model_dump(mode="json")
    assert d["backend"] == "verl" and d["n_gpus_per_node"] == 4 and d["verl_overrides"] == ["trainer.nnodes=2"]
    with pytest.raises(ValueError, match="backend"):
        train.Params(backend="deepspeed")


def test_train_verl_command_checks_its_arguments(tmp_path):
    import json

    from typer.testing import CliRunner

    from components.cli import app
    from components.trainer.verl.job import JobError, verl_job

    dirs = {k: tmp_path / k for k in ("model", "hard", "prefixes")}
    for d in dirs.values():
        d.mkdir()
    inputs = {k: str(v) for k, v in dirs.items()}
    p, ctx = verl_job({"method": "grpo", "steps": 2}, inputs, tmp_path / "o")
    # trailing KEY=VALUE words are verl Hydra overrides, applied after the params' own (the RayJob's form)
    p2, _ = verl_job({"steps": 2, "verl_overrides": ["a.b=1"]}, inputs, tmp_path / "o2",
                     overrides=["trainer.nnodes=2", "trainer.n_gpus_per_node=8"])
    assert list(p2.verl_overrides) == ["a.b=1", "trainer.nnodes=2", "trainer.n_gpus_per_node=8"]
    with pytest.raises(JobError, match="overrides: 'nnodes' is not KEY=VALUE"):
        verl_job({}, inputs, tmp_path / "o3", overrides=["nnodes"])
    assert p.backend == "verl" and p.steps == 2 and ctx.input("hard") == dirs["hard"].resolve()
    assert ctx.work_dir == (tmp_path / "o.work").resolve() and ctx.work_dir.is_dir()
    # the command line: every bad argument is one line on stderr, exit 2, before verl starts
    good = json.dumps(inputs)
    for argv, msg in [(["--params", '{"stepz": 2}', "--inputs", good], "--params: stepz: unknown parameter"),
                      (["--params", "{", "--inputs", good], "--params: not valid JSON"),
                      (["--params", "[]", "--inputs", good], "--params: expected a JSON object"),
                      (["--params", "{}", "--inputs", '{"model": "/nope"}'], "--inputs: missing hard, prefixes"),
                      (["--params", "{}", "--inputs", good, "nnodes"], "overrides: 'nnodes' is not KEY=VALUE")]:
        r = CliRunner().invoke(app, ["train-verl", *argv[:4], "--out", str(tmp_path / "o"), *argv[4:]])
        assert r.exit_code == 2 and r.stderr.startswith(msg) and r.stderr.count("\n") == 1, (argv, r.output)


def test_smoke_script_is_valid_bash_calls_existing_modules_and_checks_its_device():
    """scripts/smoke.sh runs for real on CPU in the scale tests (tests/scale); here: syntax,
    modules, the device switch, and gpu_smoke.sh being its cuda variant."""
    script = ROOT / "scripts" / "smoke.sh"
    for s in (script, ROOT / "scripts" / "gpu_smoke.sh"):
        r = subprocess.run(["bash", "-n", str(s)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    text = script.read_text()
    mods = set(re.findall(r"\s-m ([a-z_][\w.]+)", text)) | set(re.findall(r"^from ([\w.]+) import", text, re.M))
    assert {"components.cli", "components.stages"} <= mods
    assert 'engine="vllm"' in text                     # the evaluate stage runs on the vLLM engine
    for m in mods:
        assert importlib.util.find_spec(m) is not None, m
    for argv in ([], ["--device", "tpu"]):
        r = subprocess.run(["bash", str(script), *argv], capture_output=True, text=True)
        assert r.returncode == 2 and "usage: bash scripts/smoke.sh --device cpu|cuda" in r.stderr
    assert 'smoke.sh" --device cuda "$@"' in (ROOT / "scripts" / "gpu_smoke.sh").read_text()


def test_verl_run_follows_model_ref_of_a_registered_model(tmp_path, monkeypatch):
    """A paper sweep's base policy is registered by pretrain (``model_ref.json``, no copy):
    the verl backend must load the directory the ref points to, as the embedded path does."""
    from hf_fixture import build_chat_model_dir

    from components import lineage
    from components.stages import train
    from components.stages.base import NullTracker, StageContext
    from components.trainer.verl.run import prepare

    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    src = build_chat_model_dir(tmp_path / "chat")
    data = lineage.run_stage("prepare_data", {"pretrain_size": 8, "pool_size": 6, "heldout_pool_size": 4,
                                              "probe_per_level": 0}, {}, sweep="v")
    pre = lineage.run_stage("pretrain", {"model": str(src)}, {"data": data["uri"]}, sweep="v")
    assert (Path(pre["uri"]) / "model_ref.json").is_file() and not (Path(pre["uri"]) / "model").exists()
    hard, prefixes = tmp_path / "hard", tmp_path / "prefixes"
    hard.mkdir(), prefixes.mkdir()
    for split in ("train", "heldout"):
        (hard / f"{split}.jsonl").write_text((Path(data["uri"]) / f"{split}_pool.jsonl").read_text())
    (prefixes / "traces.json").write_text("{}")
    ctx = StageContext(out_dir=tmp_path / "out", work_dir=tmp_path / "work", tracker=NullTracker(),
                       inputs={"model": Path(pre["uri"]), "hard": hard, "prefixes": prefixes}, sweep="v")
    run = prepare(train.Params(backend="verl", method="grpo", steps=1, prompt_template="chat"), ctx)
    assert run["model_dir"] == src.resolve()
    assert run["config"].actor_rollout_ref.model.path == str(src.resolve())


@pytest.mark.parametrize("method", ["pg_opd"])
def test_verl_run_refuses_a_method_without_verl_form_before_ray(method, tmp_path):
    """A direct call (``rlvr train-verl``, a stage run outside sweep validation) is refused by
    the run itself, with the validation's reason, before any input is read or Ray starts."""
    from components.stages import train
    from components.stages.base import NullTracker, StageContext
    from components.trainer.verl.cells import verl_form_refusal
    from components.trainer.verl.run import prepare

    ctx = StageContext(out_dir=tmp_path / "out", work_dir=tmp_path / "work", tracker=NullTracker(),
                       inputs={}, sweep="v")          # no inputs: reading one would raise KeyError
    with pytest.raises(ValueError, match=f"method '{method}' has no verl form") as e:
        prepare(train.Params(backend="verl", method=method), ctx)
    assert verl_form_refusal(method) in str(e.value)
