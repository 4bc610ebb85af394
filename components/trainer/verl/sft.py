"""SFT on verl: the ``train`` stage's ``sft`` with ``backend: verl`` runs verl 0.9.1's Ray SFT
trainer (``verl/trainer/sft_trainer_ray.py``: a ``TrainingWorker`` group on the FSDP engine,
``sft_loss``, ``CheckpointHandler``), so the model is sharded over the cell's GPUs instead of
held by one process.

What it trains on is the embedded SFT's (``components/methods/sft.py``): the prompts with an
expert trace, each row the prompt's tokens (context, no loss) then ``target_ids`` (the
trace's tokens and EOS, the loss tokens). verl's ``sft_loss`` on ``no_padding`` rows is the
negative log-likelihood summed over the loss-mask tokens and divided by the batch's count of
them, the embedded trainer's ``token-mean`` over the step's supervised tokens. The batches are
the embedded run's too: step k takes ``batch_order(n, seed, k, batch_prompts)``
(:class:`LoopBatches`, the dataloader's sampler; one "epoch" is the whole run, so verl's
stateful dataloader resumes it mid-run). verl validates SFT by loss on a traced held-out
set; the stage's held-out prompts have no traces, so the run has no validation step (the
``evaluate`` stage measures accuracy).

Checkpoints: verl's ``global_step_*`` under the stage work dir (``resume_mode=auto``); a killed
run resumes from the last one. Metrics: verl's ``Tracking`` to the stage's MLflow run and to
one JSONL file per start (``VERL_FILE_LOGGER_PATH``; verl's file logger truncates its file),
merged into ``metrics.jsonl`` by :func:`merged_rows`.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

import torch
from verl.trainer.sft_trainer_ray import SFTTrainer

from components.data.prompting import encode_prompt
from components.methods.registry import build
from components.methods.sft import target_ids
from components.trainer.loop import FitLoop, batch_order

ROWS_FILE = "sft_rows.jsonl"
# verl's SFT worker group takes RayResourcePool's default bundle, 10 CPUs a worker slot
RAY_CPUS_PER_SLOT = 10
METRICS_DIR = "sft_metrics"


def sft_rows(problems: Sequence[Any], traces: dict[str, str], tokenizer, template: str) -> list[dict]:
    """The embedded SFT's training rows, in its training-set order: (uid, prompt ids, target ids)."""
    method = build("sft", {})
    method.setup(problems, {"expert_traces": traces, "tokenizer": tokenizer})
    return [{"uid": p.uid, "context_ids": list(encode_prompt(p, tokenizer, template)),
             "target_ids": list(target_ids(traces[p.uid], tokenizer))} for p in method.training_problems(problems)]


class SFTRows(torch.utils.data.Dataset):
    """verl's ``data.custom_cls`` (``create_sft_dataset`` calls it with verl's arguments): the
    rows file as ``no_padding`` samples, the loss mask on the target tokens only."""

    def __init__(self, parquet_files, tokenizer=None, config=None, processor=None, max_samples: int = -1):
        path = parquet_files if isinstance(parquet_files, (str, Path)) else list(parquet_files)[0]
        self.rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
        if not self.rows:
            raise ValueError(f"{path}: no SFT rows")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        r = self.rows[i]
        ids = r["context_ids"] + r["target_ids"]
        mask = [0] * len(r["context_ids"]) + [1] * len(r["target_ids"])
        return {"input_ids": torch.tensor(ids, dtype=torch.long), "position_ids": torch.arange(len(ids)),
                "loss_mask": torch.tensor(mask, dtype=torch.long)}


class LoopBatches(torch.utils.data.Sampler):
    """The embedded loop's batches, step after step, as one sampler pass: the dataloader's
    batch k (``batch_size = batch``) is ``batch_order(n, seed, k, batch)``."""

    def __init__(self, n: int, seed: int, steps: int, batch: int):
        self.n, self.seed, self.steps, self.batch = n, seed, steps, batch

    def __iter__(self):
        for step in range(self.steps):
            yield from batch_order(self.n, self.seed, step, self.batch)

    def __len__(self) -> int:
        return self.steps * self.batch

    def set_epoch(self, epoch: int) -> None:
        if epoch:
            raise ValueError(f"LoopBatches: the run is one pass of {self.steps} steps (asked for epoch {epoch})")


def micro_batch_of(batch: int, micro_batch: int, dp: int) -> int:
    """verl's micro-batch: it must divide each data-parallel rank's rows, where the embedded
    trainer ends on a partial one. The largest divisor not above ``micro_batch``: the loss is
    normalised by the whole batch's tokens, so the split changes memory only."""
    if batch % dp:
        raise ValueError(f"sft on verl: batch_prompts {batch} is not a multiple of the {dp} data-parallel workers")
    per_rank = batch // dp
    return max(d for d in range(1, min(micro_batch, per_rank) + 1) if per_rank % d == 0)


def overrides(cfg, params, *, model_dir: Path, work_dir: Path, rows: list[dict], device: str,
              project: str, experiment: str) -> list[str]:
    """Hydra overrides of verl's ``sft_trainer_engine`` config for one run; the sweep's
    ``verl_overrides`` come last."""
    from components.trainer.verl.hydra_config import hydra_value

    ov = {
        "model.path": str(model_dir),
        "data.train_files": str(work_dir / ROWS_FILE),
        "data.val_files": None,
        "data.custom_cls.path": f"pkg://{__name__}",
        "data.custom_cls.name": SFTRows.__name__,
        "data.pad_mode": "no_padding",
        "data.train_batch_size": cfg.batch_prompts,
        "data.micro_batch_size_per_gpu": micro_batch_of(cfg.batch_prompts, cfg.micro_batch,
                                                        params.n_gpus_per_node * params.nnodes),
        "data.use_dynamic_bsz": False,
        "data.max_length": max(len(r["context_ids"]) + len(r["target_ids"]) for r in rows),
        "data.truncation": "error",
        "data.num_workers": 0,
        "optim.lr": cfg.lr,
        "optim.weight_decay": cfg.weight_decay,
        "optim.lr_warmup_steps": cfg.warmup_steps if cfg.warmup_steps > 0 else -1,
        "optim.clip_grad": cfg.grad_clip,
        "engine.seed": cfg.seed,
        "checkpoint.save_contents": "[model,optimizer,extra,hf_model]",
        "trainer.default_local_dir": str(work_dir / "verl_checkpoints"),
        "trainer.project_name": project,
        "trainer.experiment_name": experiment,
        "trainer.total_epochs": 1,
        "trainer.total_training_steps": cfg.steps,
        "trainer.save_freq": cfg.ckpt_every,
        "trainer.test_freq": -1,
        "trainer.max_ckpt_to_keep": 2,
        "trainer.resume_mode": "auto",
        "trainer.logger": "[console,mlflow,file]",
        "trainer.seed": cfg.seed,
        "trainer.device": device,
        "trainer.n_gpus_per_node": params.n_gpus_per_node,
        "trainer.nnodes": params.nnodes,
    }
    return [f"{k}={hydra_value(v)}" for k, v in ov.items()]


# What a machine without a GPU changes (as hydra_config.CPU_OVERRIDES for the actor)
CPU_OVERRIDES = ("model.use_remove_padding=false", "+model.override_config.attn_implementation=sdpa",
                 "model.enable_gradient_checkpointing=false", "engine.use_torch_compile=false",
                 "engine.strategy=fsdp2")


def stage_config(cfg, params, *, model_dir: Path, work_dir: Path, rows: list[dict], sweep: str):
    """verl's resolved SFT config for one train stage call."""
    from omegaconf import OmegaConf

    from components.trainer.verl.hydra_config import compose

    gpu = torch.cuda.is_available()
    ov = overrides(cfg, params, model_dir=model_dir, work_dir=work_dir, rows=rows, device="cuda" if gpu else "cpu",
                   project=sweep or "rlvr", experiment=f"train-sft-s{cfg.seed}")
    config = compose(ov + list(() if gpu else CPU_OVERRIDES) + list(params.verl_overrides),
                     config_name="sft_trainer_engine")
    OmegaConf.resolve(config)
    return config


class RLVRSFTTrainer(SFTTrainer):
    """verl's Ray SFT trainer with the embedded loop's batches (:class:`LoopBatches`) and the
    dataloader in the driver (verl's Ray trainer starts 8 loader processes; the rows are
    already tokenized)."""

    def __init__(self, config, *, seed: int):
        self.seed = seed
        super().__init__(config)

    def _build_dataloader(self):
        from torchdata.stateful_dataloader import StatefulDataLoader
        from verl.utils.dataset.dataset_utils import SFTTensorCollator

        c = self.config
        steps, batch = int(c.trainer.total_training_steps), int(c.data.train_batch_size)
        self.global_batch_size = self.train_batch_size_per_dp = batch
        self.train_sampler = LoopBatches(len(self.train_dataset), self.seed, steps, batch)
        self.collate_fn = SFTTensorCollator(c.data.pad_mode)
        self.train_dataloader = StatefulDataLoader(self.train_dataset, batch_size=batch, sampler=self.train_sampler,
                                                   collate_fn=self.collate_fn, num_workers=0, drop_last=True)
        self.val_dataloader = None
        self.total_training_steps = self.optimizer_config.total_training_steps = steps
        self.steps_per_epoch = len(self.train_dataloader)
        self.save_freq, self.test_freq = c.trainer.save_freq, c.trainer.test_freq


def merged_rows(metrics_dir: Path) -> list[dict]:
    """The run's metric rows across its starts: the start at checkpoint s logged steps s+1...;
    rows a killed start logged past its last checkpoint are replaced by the next start's."""
    starts = sorted((int(p.stem.rsplit("_", 1)[1]), p) for p in metrics_dir.glob("from_step_*.jsonl"))
    out: dict[int, dict] = {}
    for i, (s, path) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else None
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r["step"] > s and (end is None or r["step"] <= end):
                out.setdefault(r["step"], {"step": r["step"]}).update(r["data"])
    return [out[k] for k in sorted(out)]


def records(cfg, rows: list[dict]) -> FitLoop:
    """The loop's record writer (``FitLoop.write_records``: metrics, tokens, method state,
    summary) over verl's rows: SFT generates nothing, so its token meter is empty."""
    from components.engine.base import TokenMeter

    loop = FitLoop()
    loop.cfg, loop.method, loop.backend_name = cfg, build("sft", {}), "verl"
    loop.meter = TokenMeter(method=cfg.method, seed=cfg.seed, backend="verl")
    loop.history = rows
    return loop


def train_sft_with_verl(params: Any, ctx, on_cpu: dict[str, str]) -> dict:
    from components.data.schema import read_problems
    from components.stages.common import read_json
    from components.hf_models import load_tokenizer_any, model_dir_of
    from components.trainer.train_config import train_config_of
    from components.trainer.verl.run import attach_mlflow, end_mlflow_run, ray_session

    cfg = train_config_of(params)
    model_dir = model_dir_of(ctx.input("model"))   # a registered base policy's model_ref.json followed
    tok = load_tokenizer_any(model_dir)
    rows = sft_rows(read_problems(ctx.input("hard") / "train.jsonl"),
                    read_json(ctx.input("prefixes") / "traces.json"), tok, cfg.prompt_template)
    if len(rows) < cfg.batch_prompts:
        raise ValueError(f"sft on verl: {len(rows)} prompts have an expert trace, fewer than batch_prompts "
                         f"{cfg.batch_prompts} (verl's SFT batches are full)")
    work = Path(ctx.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    (work / ROWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = stage_config(cfg, params, model_dir=model_dir, work_dir=work, rows=rows, sweep=ctx.sweep)
    attach_mlflow(ctx.tracker.run_id)
    status = "FAILED"
    with ray_session(params, config, on_cpu, cpu_units=RAY_CPUS_PER_SLOT * params.n_gpus_per_node * params.nnodes):
        trainer = RLVRSFTTrainer(config, seed=cfg.seed)
        start = trainer.resume_global_step
        if start:
            print(f"[train sft verl] resumed at step {start}", flush=True)
        (work / METRICS_DIR).mkdir(exist_ok=True)
        os.environ["VERL_FILE_LOGGER_PATH"] = str(work / METRICS_DIR / f"from_step_{start}.jsonl")
        try:
            trainer.fit()
            status = "FINISHED"
        finally:
            end_mlflow_run(status)
    hf = Path(config.trainer.default_local_dir) / f"global_step_{cfg.steps}" / "huggingface"
    if not (hf / "config.json").is_file():
        raise RuntimeError(f"{hf}: no HF export in the final verl SFT checkpoint (save_contents needs hf_model)")
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(hf, ctx.out_dir / "model", dirs_exist_ok=True)
    tok.save_pretrained(ctx.out_dir / "model")
    loop = records(cfg, merged_rows(work / METRICS_DIR))
    loop.write_records(ctx.out_dir)
    return loop.summary()
