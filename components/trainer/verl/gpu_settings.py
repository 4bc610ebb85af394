"""The paper sweeps' verl GPU settings beside verl's own GRPO example scripts, knob by knob.

    python -m components.trainer.verl.gpu_settings     # markdown: docs/scale-out.md, "GPU settings"

Each verl train cell of a kubernetes sweep is rendered into verl's composed Hydra config as its
GPU pod would get it (``hydra_config.overrides`` + the sweep's ``verl_overrides``; no CPU
overrides), then compared with the nearest example of verl's repository (same model size,
nearest GPU count). The examples' values below are read from those scripts (verl commit
b178a3c, paths relative to the repository root).
"""
from __future__ import annotations

from typing import Any, Callable

from components.trainer.verl.cells import memory_of, verl_cells

A = "actor_rollout_ref."
KNOBS = {
    "ppo_micro_batch_size_per_gpu": A + "actor.ppo_micro_batch_size_per_gpu",
    "log_prob_micro_batch_size_per_gpu": A + "rollout.log_prob_micro_batch_size_per_gpu",
    "ref log_prob_micro_batch_size_per_gpu": A + "ref.log_prob_micro_batch_size_per_gpu",
    "gpu_memory_utilization": A + "rollout.gpu_memory_utilization",
    "tensor_model_parallel_size": A + "rollout.tensor_model_parallel_size",
    "actor param_offload": A + "actor.fsdp_config.param_offload",
    "actor optimizer_offload": A + "actor.fsdp_config.optimizer_offload",
    "ref param_offload": A + "ref.fsdp_config.param_offload",
    "use_dynamic_bsz": A + "actor.use_dynamic_bsz",
    "ppo_max_token_len_per_gpu": A + "actor.ppo_max_token_len_per_gpu",
    "use_remove_padding": A + "model.use_remove_padding",
    "enable_gradient_checkpointing": A + "model.enable_gradient_checkpointing",
}

_LORA_1GPU = {"actor param_offload": True, "actor optimizer_offload": True, "ref param_offload": True,
              "tensor_model_parallel_size": 1, "use_dynamic_bsz": False, "use_remove_padding": True,
              "enable_gradient_checkpointing": True, "lora_rank": 32, "sequence": "512 + 1024"}
_FULL_8GPU = {"ppo_micro_batch_size_per_gpu": 16, "log_prob_micro_batch_size_per_gpu": 16,
              "ref log_prob_micro_batch_size_per_gpu": 16, "gpu_memory_utilization": 0.6,
              "tensor_model_parallel_size": 2, "actor param_offload": False, "actor optimizer_offload": False,
              "ref param_offload": True, "use_dynamic_bsz": False, "use_remove_padding": True,
              "enable_gradient_checkpointing": True, "sequence": "1024 + 1024"}
# (model size in billions, GPUs) -> (script, its values); the 1-GPU tuning scripts are LoRA runs
# whose micro-batch is the whole mini-batch (legacy ``ppo_micro_batch_size``)
EXAMPLES: dict[tuple[float, int], tuple[str, dict[str, Any]]] = {
    (1.5, 1): ("examples/tuning/1.5b/qwen2-1.5b_grpo-lora_1_h100_fsdp_vllm.sh",
               {**_LORA_1GPU, "ppo_micro_batch_size_per_gpu": 128, "log_prob_micro_batch_size_per_gpu": 128,
                "ref log_prob_micro_batch_size_per_gpu": 128, "gpu_memory_utilization": 0.1}),
    (3, 1): ("examples/tuning/3b/qwen2-3b_grpo-lora_1_h100_fsdp_vllm.sh",
             {**_LORA_1GPU, "ppo_micro_batch_size_per_gpu": 62, "log_prob_micro_batch_size_per_gpu": 62,
              "ref log_prob_micro_batch_size_per_gpu": 62, "gpu_memory_utilization": 0.1}),
    (3, 2): ("examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh",
             {**_FULL_8GPU, "ppo_micro_batch_size_per_gpu": 40, "log_prob_micro_batch_size_per_gpu": 40,
              "ref log_prob_micro_batch_size_per_gpu": 40, "lora_rank": 64, "sequence": "512 + 1024"}),
    (7, 1): ("examples/tuning/7b/qwen2-7b_grpo-lora_1_h100_fsdp_vllm.sh",
             {**_LORA_1GPU, "ppo_micro_batch_size_per_gpu": 16, "log_prob_micro_batch_size_per_gpu": 16,
              "ref log_prob_micro_batch_size_per_gpu": 16, "gpu_memory_utilization": 0.2}),
    (7, 8): ("examples/grpo_trainer/run_qwen2-7b_math.sh", _FULL_8GPU),
}

# Why a knob may differ from the example (the same reason holds for every cell it differs in)
WHY = {
    "ppo_micro_batch_size_per_gpu": "sized to this cell's sequence length by the memory check (logits grow with "
                                    "micro-batch x (prompt + response) x vocabulary)",
    "log_prob_micro_batch_size_per_gpu": "= micro_batch (one knob for the sweep; no gradients, so it is never the peak)",
    "ref log_prob_micro_batch_size_per_gpu": "= micro_batch unless the sweep's verl_overrides set it",
    "gpu_memory_utilization": "full fine-tuning keeps the actor resident beside vLLM (the LoRA examples can give "
                              "vLLM less); the memory check's rollout peak bounds it",
    "tensor_model_parallel_size": "one replica a GPU: <= 7B in bf16 fits one 80 GiB GPU with KV room, and more "
                                  "replicas generate more groups at once",
    "actor param_offload": "verl's default (off): the GPUs hold the sharded actor; the LoRA examples offload a "
                           "full model onto one GPU",
    "actor optimizer_offload": "as param_offload",
    "ref param_offload": "verl's default (off); the sweep has kl_coef 0, so verl builds no reference model",
    "use_dynamic_bsz": "off: the method's micro_batch is what the memory check sizes",
    "ppo_max_token_len_per_gpu": "unused without use_dynamic_bsz",
    "use_remove_padding": "same",
    "enable_gradient_checkpointing": "same",
}


def size_of(model: str) -> float:
    from components.trainer.verl.memory import arch_of

    a = arch_of(model)
    return round(a.params() / 1e9, 1) if a else 0.0


def nearest_example(model: str, gpus: int) -> tuple[str, dict[str, Any]]:
    size = size_of(model)
    return min(EXAMPLES.items(), key=lambda kv: (abs(kv[0][0] - size), abs(kv[0][1] - gpus)))[1]


def rendered(sweep, cell: dict[str, Any], compose: Callable):
    """verl's composed config of one cell as its GPU pod gets it (no CPU overrides)."""
    from components.stages.train import Params
    from components.trainer.train_config import train_config_of
    from components.trainer.verl.hydra_config import samples_per_prompt, stage_overrides

    p = Params(**cell["params"])
    cfg = train_config_of(p)
    return compose(stage_overrides(cfg, p, model_dir=f"/models/{cell['model']}", work_dir="/rlvr/work",
                                   n=samples_per_prompt(cfg), sweep=sweep.name, experiment=cell["key"], gpu=True))


def comparison(sweep, compose: Callable) -> list[dict[str, Any]]:
    """One row per (model, knob) of the sweep's verl cells whose value differs from the example."""
    from omegaconf import OmegaConf

    rows, seen = [], set()
    for cell in verl_cells(sweep):
        c = rendered(sweep, cell, compose)
        gpus = int(c.trainer.n_gpus_per_node) * int(c.trainer.nnodes)
        sig = (cell["model"], tuple(OmegaConf.select(c, k) for k in KNOBS.values()))
        if sig in seen:
            continue
        seen.add(sig)
        path, ex = nearest_example(cell["model"], gpus)
        for knob, key in KNOBS.items():
            ours = OmegaConf.select(c, key)
            if knob in ex and ex[knob] != ours:
                rows.append({"sweep": sweep.name, "model": cell["model"], "gpus": gpus, "knob": knob, "ours": ours,
                             "example": ex[knob], "script": path, "why": WHY[knob]})
    return rows


def report() -> str:
    """The comparison table and each cell's memory line, for every kubernetes sweep in dags/sweeps."""
    import glob
    from pathlib import Path

    from components.sweep import load_sweep
    from components.trainer.verl.hydra_config import compose
    from components.trainer.verl.memory import line

    root = Path(__file__).resolve().parents[3]
    out = ["| sweep | model | GPUs | knob | ours | verl example | example script | why |",
           "|---|---|---|---|---|---|---|---|"]
    memory = []
    for path in sorted(glob.glob(str(root / "dags/sweeps/*.yaml"))):
        sweep = load_sweep(path)
        if sweep.executor != "kubernetes":
            continue
        for r in comparison(sweep, compose):
            out.append(f"| {r['sweep']} | {r['model']} | {r['gpus']} | {r['knob']} | {r['ours']} | {r['example']} | "
                       f"`{r['script']}` | {r['why']} |")
        for cell in verl_cells(sweep, agentic=True):
            est = memory_of(cell)
            text = line(est) if est else f"{cell['model']}: no architecture facts"
            if (sweep.name, text) not in memory:
                memory.append((sweep.name, text))
    out.append("")
    out += [f"- {name}: {text}" for name, text in memory]
    return "\n".join(out) + "\n"


BEGIN, END = "<!-- generated:gpu-settings -->\n", "<!-- /generated:gpu-settings -->"


def block_of(doc: str) -> str:
    """The generated block's body in a docs page; ValueError naming the markers when absent."""
    if BEGIN not in doc or END not in doc:
        raise ValueError(f"no {BEGIN.strip()} ... {END} block")
    return doc.split(BEGIN, 1)[1].split(END, 1)[0]


def main(argv=None) -> None:
    import argparse
    from pathlib import Path

    ap = argparse.ArgumentParser(description="verl configs of the paper sweeps vs verl's example scripts")
    ap.add_argument("--docs", type=Path, help="rewrite this page's generated:gpu-settings block instead of printing")
    a = ap.parse_args(argv)
    text = report()
    if a.docs is None:
        print(text, end="")
        return
    doc = a.docs.read_text(encoding="utf-8")
    new = doc.replace(BEGIN + block_of(doc) + END, BEGIN + text + END)
    tmp = a.docs.with_suffix(".tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(a.docs)
    print(f"{a.docs}: gpu-settings block written")


if __name__ == "__main__":
    main()
