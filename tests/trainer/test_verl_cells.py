"""Sweep validation of verl train cells: methods with no verl form, per-GPU memory arithmetic,
and every sweep's verl cells rendered into verl's own Hydra config."""
from __future__ import annotations

import glob
from pathlib import Path

import pytest
import yaml

from components.sweep import SweepError, load_sweep, parse_sweep
from components.trainer.verl.cells import memory_of, refusal_from_class, verl_cells, verl_form_refusal
from components.trainer.verl.memory import KNOWN, VERL_DEFAULTS, arch_of, estimate

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = sorted(glob.glob(str(ROOT / "dags/sweeps/*.yaml")))


def _data(name: str) -> dict:
    return yaml.safe_load((ROOT / f"dags/sweeps/{name}.yaml").read_text())


def test_methods_without_a_verl_form():
    from components.methods.registry import available

    refused = sorted(m for m in available() if verl_form_refusal(m) is not None)
    assert refused == ["pg_opd"]
    # the validation table is what the classes say, for every registered method
    assert {m: verl_form_refusal(m) for m in available()} == {m: refusal_from_class(m) for m in available()}


@pytest.mark.parametrize("method", ["pg_opd"])
def test_method_with_no_verl_form_is_refused_at_validation(method):
    d = _data("vigor_table1")
    d["methods"] = ["grpo", method]
    d["method_train"] = {}          # every method on the train block's backend: verl
    with pytest.raises(SweepError) as e:
        parse_sweep(d, "dags/sweeps/vigor_table1.yaml")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("dags/sweeps/vigor_table1.yaml: stages.train.backend: ")
    assert f"method {method!r} has no verl form" in msg and "backend: embedded" in msg


def test_cell_that_cannot_fit_its_gpus_is_refused():
    d = _data("vsr_table1")
    d["stages"]["train"]["micro_batch"] = 4      # four 16K-token sequences a micro-batch on 80 GiB
    with pytest.raises(SweepError) as e:
        parse_sweep(d, "vsr.yaml")
    msg = str(e.value)
    assert msg.startswith("vsr.yaml: stages.train.micro_batch: cell qwen2.5-7b-instruct-grpo-s0 (backend verl) "
                          "cannot fit its GPUs: update needs ") and "\n" not in msg
    d["stages"]["train"]["micro_batch"] = 1
    d["stages"]["train"]["gpu_memory_utilization"] = 0.9   # vLLM's share beside the resident actor
    with pytest.raises(SweepError, match="rollout needs .* lower gpu_memory_utilization or offload"):
        parse_sweep(d, "vsr.yaml")
    d["stages"]["train"]["verl_overrides"] = ["actor_rollout_ref.actor.fsdp_config.param_offload=true",
                                              "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"]
    parse_sweep(d, "vsr.yaml")                    # offloading the resident actor makes room


def test_agentic_cells_are_checked_at_their_episode_length():
    """An agentic verl cell's sequence is its row: one turn (``layout: turns``), or the prompt and
    the whole episode (``serialized``); a KL loss set through verl_overrides counts the reference."""
    d = _data("vsr_agentic")
    est = memory_of(verl_cells(parse_sweep(d, "agentic.yaml"), agentic=True)[0])
    train = d["stages"]["train"]
    assert est["seq_tokens"] == d["max_prompt_tokens"] + train["max_episode_tokens"] and est["gib"]["ref"] > 0
    assert not verl_cells(parse_sweep(d, "agentic.yaml"))            # the math-only list (GPU settings)
    train["micro_batch"] = 32
    with pytest.raises(SweepError) as e:
        parse_sweep(d, "agentic.yaml")
    assert str(e.value).startswith("agentic.yaml: stages.train.micro_batch: cell qwen2.5-1.5b-instruct-grpo-s0 "
                                   "(backend verl) cannot fit its GPUs: update needs ")
    train["layout"] = "turns"                   # one turn a row: max_prompt_length + max_new_tokens
    turns = memory_of(verl_cells(parse_sweep({**d, "stages": {**d["stages"], "train": {**train, "micro_batch": 2}}},
                                             "agentic.yaml"), agentic=True)[0])
    assert turns["seq_tokens"] == d["max_prompt_tokens"] + d["max_response_tokens"]


def test_memory_arithmetic_scales_as_it_should():
    p = {"n_gpus_per_node": 8, "micro_batch": 4, "max_prompt_length": 1024, "max_new_tokens": 1024,
         "gpu_memory_utilization": 0.5}
    one = estimate("Qwen/Qwen2.5-7B-Instruct", {**p, "n_gpus_per_node": 1}, 80)
    eight = estimate("Qwen/Qwen2.5-7B", p, 80)
    assert one["gib"]["optimizer"] == pytest.approx(8 * eight["gib"]["optimizer"], rel=1e-3)
    assert one["refusal"] is not None and eight["refusal"] is None
    # 16 B a parameter for FSDP's fp32 params, grads and AdamW moments on one GPU
    actor = sum(one["gib"][k] for k in ("actor_params", "actor_grads", "optimizer"))
    assert actor == pytest.approx(16 * KNOWN["Qwen/Qwen2.5-7B"].params() / 2**30, rel=1e-3)
    dyn = estimate("Qwen/Qwen2.5-7B", {**p, "verl_overrides": ["actor_rollout_ref.actor.use_dynamic_bsz=true",
                                                              "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096"]}, 80)
    assert dyn["micro_tokens"] == 4096 and dyn["gib"]["logits"] < eight["gib"]["logits"]
    assert estimate("someone/unknown-model", p, 80) is None


def test_parameter_count_matches_a_real_model(tmp_path):
    """The arithmetic's parameter count is the count of a real Qwen2 checkpoint's tensors."""
    from hf_fixture import build_chat_model_dir
    from transformers import AutoModelForCausalLM

    d = build_chat_model_dir(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(d)
    assert arch_of(str(d)).params() == sum(t.numel() for t in model.parameters())


def test_known_architectures_have_their_published_sizes():
    # parameter counts the model cards state (Qwen2.5: 1.54B, 3.09B, 7.61B; Llama-3.2-3B: 3.21B)
    sizes = {k: round(a.params() / 1e9, 2) for k, a in KNOWN.items()}
    assert sizes["Qwen/Qwen2.5-1.5B"] == 1.54 and sizes["Qwen/Qwen2.5-3B"] == 3.09
    assert sizes["Qwen/Qwen2.5-7B"] == pytest.approx(7.61, abs=0.01) and sizes["meta-llama/Llama-3.2-3B"] == 3.21


@pytest.fixture(scope="module")
def verl_compose():
    pytest.importorskip("verl", reason="verl (the GPU backend) is not installed in this environment")
    from components.trainer.verl.hydra_config import compose

    return compose


def test_verl_defaults_are_verls(verl_compose):
    from omegaconf import OmegaConf

    c = verl_compose([])
    for key, want in VERL_DEFAULTS.items():
        assert OmegaConf.select(c, key) == want, key


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: Path(p).stem)
def test_every_sweeps_verl_cells_render_and_fit(path, verl_compose):
    from omegaconf import OmegaConf

    from components.trainer.verl.gpu_settings import rendered

    sweep = load_sweep(path)
    for cell in verl_cells(sweep):
        c = rendered(sweep, cell, verl_compose)
        assert c.trainer.n_gpus_per_node == cell["params"].get("n_gpus_per_node", 1)
        assert c.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == cell["params"]["micro_batch"]
        assert OmegaConf.select(c, "actor_rollout_ref.rollout.response_length") == cell["params"]["max_new_tokens"]
        if sweep.executor == "kubernetes":
            est = memory_of(cell)
            assert est is not None, f"{cell['model']}: no architecture facts for the memory check"
            assert est["refusal"] is None


def test_docs_gpu_settings_block_is_what_the_comparison_prints_now():
    from pathlib import Path

    from components.trainer.verl import gpu_settings

    doc = (Path(__file__).resolve().parents[2] / "docs" / "scale-out.md").read_text(encoding="utf-8")
    assert gpu_settings.block_of(doc) == gpu_settings.report(), \
        "stale: python -m components.trainer.verl.gpu_settings --docs docs/scale-out.md"
    with pytest.raises(ValueError, match="generated:gpu-settings"):
        gpu_settings.block_of(doc.replace(gpu_settings.BEGIN, ""))
