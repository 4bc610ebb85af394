"""SFT on verl without Ray workers: the rows verl's SFT trainer reads are the embedded SFT's
(same prompt and target tokens, loss on the target only), verl's own ``sft_loss`` on them
through verl's dataset and collator equals the embedded trainer's NLL, the dataloader draws
the embedded loop's batches and resumes mid-run, the train params map onto verl's
``sft_trainer_engine`` config, and the metric rows of a killed and resumed run merge into one
history. ``tests/scale/test_verl_cpu.py`` runs the trainer for real."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from components.data.schema import Problem
from components.engine.base import SamplingParams
from components.methods.base import RolloutContext
from components.trainer.train_config import TrainConfig

PROBLEMS = [Problem(uid=f"u{i}", prompt=f"Compute {i}+{i + 2}.", answer=str(2 * i + 2)) for i in range(6)]
# u4 has no trace: SFT trains on the traced prompts only
TRACES = {f"u{i}": f"{i}+{i + 2}={2 * i + 2} \\boxed{{{2 * i + 2}}}" for i in (0, 1, 2, 3, 5)}


def embedded_groups(tok, template="raw"):
    """What the embedded SFT trains on: its method's supervised groups."""
    import numpy as np

    from components.data.prompting import encode_prompt
    from components.methods.registry import build

    m = build("sft", {})
    m.setup(PROBLEMS, {"expert_traces": TRACES, "tokenizer": tok})
    engine = type("Engine", (), {"tokenizer": tok})()
    ctx = RolloutContext(engine=engine, grade=None, encode_prompt=lambda p: encode_prompt(p, tok, template),
                         sampling=SamplingParams(1.0, 1.0, 8, 0), step=0)
    return m.rollout(m.training_problems(PROBLEMS), ctx, np.random.default_rng(0))


def test_rows_are_the_embedded_sft_targets(tok):
    from components.trainer.verl.sft import SFTRows, sft_rows

    rows = sft_rows(PROBLEMS, TRACES, tok, "raw")
    groups = embedded_groups(tok)
    assert [r["uid"] for r in rows] == [g.uid for g in groups] == ["u0", "u1", "u2", "u3", "u5"]
    for r, g in zip(rows, groups):
        assert tuple(r["context_ids"]) == g.context_ids and tuple(r["target_ids"]) == g.responses[0]
        assert r["target_ids"][-1] == tok.eos_token_id


def _config(tmp_path, tok, rows, **params):
    from components.stages.train import Params
    from components.trainer.verl.sft import ROWS_FILE, stage_config

    (tmp_path / ROWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = Params(backend="verl", method="sft", steps=3, batch_prompts=2, micro_batch=1, lr=2e-5, warmup_steps=2,
               grad_clip=0.5, ckpt_every=1, seed=7, **params)
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    tok.save_pretrained(model_dir)
    return p, stage_config(TrainConfig(**p.model_dump(include=set(TrainConfig.model_fields))), p,
                           model_dir=model_dir, work_dir=tmp_path, rows=rows, sweep="s")


def test_train_params_map_onto_verls_sft_config(tmp_path, tok):
    from verl.trainer.sft_trainer_ray import create_sft_dataset
    from verl.utils.config import omega_conf_to_dataclass

    from components.trainer.verl.sft import SFTRows, sft_rows

    rows = sft_rows(PROBLEMS, TRACES, tok, "raw")
    p, c = _config(tmp_path, tok, rows, verl_overrides=("optim.betas=[0.9,0.95]",))
    assert (c.data.train_batch_size, c.data.micro_batch_size_per_gpu, c.data.pad_mode) == (2, 1, "no_padding")
    assert c.data.max_length == max(len(r["context_ids"]) + len(r["target_ids"]) for r in rows)
    assert (c.optim.lr, c.optim.lr_warmup_steps, c.optim.clip_grad, c.optim.weight_decay) == (2e-5, 2, 0.5, 0.0)
    assert list(c.optim.betas) == [0.9, 0.95]                   # the sweep's overrides come last
    assert (c.trainer.total_training_steps, c.trainer.save_freq, c.trainer.test_freq) == (3, 1, -1)
    assert c.trainer.resume_mode == "auto" and c.trainer.default_local_dir == str(tmp_path / "verl_checkpoints")
    assert "hf_model" in c.checkpoint.save_contents and "mlflow" in c.trainer.logger and "file" in c.trainer.logger
    assert c.trainer.device == ("cuda" if torch.cuda.is_available() else "cpu") and c.data.val_files is None
    omega_conf_to_dataclass(c.engine), omega_conf_to_dataclass(c.optim)    # verl's own dataclasses accept them
    ds = create_sft_dataset(c.data.train_files, c.data, tok, None)          # verl's dataset factory
    assert isinstance(ds, SFTRows) and len(ds) == len(rows)


def test_verls_sft_loss_on_the_rows_equals_the_embedded_nll(tmp_path, tok, model):
    """verl's collator and ``sft_loss`` on our rows, with the model's log-probs in verl's layout
    (position i holds the log-prob of token i+1), against the embedded trainer's supervised term
    ``(-logp * token_weights(mask, 'token-mean')).sum()`` on the method's groups."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.dataset_utils import SFTTensorCollator
    from verl.workers.utils.losses import sft_loss

    from components.trainer.sequences import build_sequences, response_logprobs, token_weights
    from components.trainer.verl.sft import SFTRows, sft_rows

    rows = sft_rows(PROBLEMS, TRACES, tok, "raw")
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = SFTRows(str(path))
    batch = SFTTensorCollator("no_padding")([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        per_row = []
        for item in (ds[i] for i in range(len(ds))):
            logits = model(input_ids=item["input_ids"][None]).logits[0].float()
            lp = torch.log_softmax(logits[:-1], -1).gather(-1, item["input_ids"][1:, None])[:, 0]
            per_row.append(torch.cat([lp, torch.zeros(1)]))
        td = tu.get_tensordict(tensor_dict=dict(batch), non_tensor_dict={"pad_mode": "no_padding"})
        tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=int(batch["loss_mask"].values().sum()))
        verl_loss, _ = sft_loss(None, {"log_probs": torch.nested.as_nested_tensor(per_row, layout=torch.jagged)}, td)

        seqs = build_sequences(embedded_groups(tok), tok.pad_token_id)
        logp, _ = response_logprobs(model, seqs.input_ids, seqs.attention)
        w = token_weights(seqs.response_mask * seqs.supervised[:, None], "token-mean")
        embedded = (-logp * w).sum()
    assert int(batch["loss_mask"].values().sum()) == int(seqs.response_mask.sum())
    assert float(verl_loss) == pytest.approx(float(embedded), rel=1e-5)


def test_micro_batch_divides_each_ranks_rows():
    from components.trainer.verl.sft import micro_batch_of

    assert [micro_batch_of(4, 8, 1), micro_batch_of(6, 4, 1), micro_batch_of(8, 8, 2), micro_batch_of(5, 1, 1)] == [
        4, 3, 4, 1]
    with pytest.raises(ValueError, match="batch_prompts 6 is not a multiple of the 4 data-parallel workers"):
        micro_batch_of(6, 2, 4)


def test_dataloader_draws_the_embedded_batches_and_resumes_mid_run():
    from torchdata.stateful_dataloader import StatefulDataLoader

    from components.trainer.loop import batch_order
    from components.trainer.verl.sft import LoopBatches

    n, seed, steps, batch = 5, 3, 6, 2

    def loader():
        return StatefulDataLoader(list(range(n)), batch_size=batch, sampler=LoopBatches(n, seed, steps, batch),
                                  drop_last=True)

    want = [batch_order(n, seed, s, batch) for s in range(steps)]
    assert [b.tolist() for b in loader()] == want
    first = loader()
    it = iter(first)
    [next(it) for _ in range(2)]
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == want[2:]
    with pytest.raises(ValueError, match="one pass of 6 steps"):
        LoopBatches(n, seed, steps, batch).set_epoch(1)


def test_metric_rows_of_a_killed_and_resumed_run_merge(tmp_path):
    from components.trainer.verl.sft import merged_rows

    def write(name, steps):
        (tmp_path / name).write_text("".join(json.dumps({"step": s, "data": {"train/loss": 10.0 * s + len(name)}})
                                             + "\n" for s in steps))

    write("from_step_0.jsonl", [1, 2, 3])        # killed after step 3, last checkpoint at 2
    write("from_step_2.jsonl", [3, 4])
    rows = merged_rows(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[2]["train/loss"] == 30.0 + len("from_step_2.jsonl") and rows[0]["train/loss"] == 10.0 + 17


def test_sft_is_accepted_on_verl_at_sweep_validation():
    from components.trainer.verl.cells import refusal_from_class, verl_form_refusal

    assert verl_form_refusal("sft") is None and refusal_from_class("sft") is None


def test_sft_with_too_few_traced_prompts_is_refused_before_ray(tmp_path, tok, model):
    from components.data.schema import write_problems
    from components.stages import train
    from components.stages.base import NullTracker, StageContext
    from components.trainer.verl.sft import train_sft_with_verl

    model_dir, hard, prefixes = tmp_path / "model", tmp_path / "hard", tmp_path / "prefixes"
    for d in (model_dir, hard, prefixes):
        d.mkdir()
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    write_problems(hard / "train.jsonl", PROBLEMS)
    (prefixes / "traces.json").write_text(json.dumps(TRACES))
    ctx = StageContext(out_dir=tmp_path / "out", work_dir=tmp_path / "work", tracker=NullTracker(),
                       inputs={"model": model_dir, "hard": hard, "prefixes": prefixes}, sweep="v")
    with pytest.raises(ValueError, match="5 prompts have an expert trace, fewer than batch_prompts 8"):
        train_sft_with_verl(train.Params(backend="verl", method="sft", batch_prompts=8), ctx, {})
    assert not (tmp_path / "work").exists()
