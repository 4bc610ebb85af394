"""What the papers state about their training setups, as sweep fields: one row per stated value,
with where the seed says it (``/work/shared/seeds/``), the field of the paper sweep
(``dags/sweeps/<sweep>.yaml``) that carries it, and the value. ``tests/analysis/test_paper_sweeps.py``
reads the sweeps and checks that each row's field holds the row's value, and that every training
knob of a paper sweep is set explicitly (none falls back to a tiny-policy default).

A row whose setting the sweep model cannot express yet names the missing field
(``missing = "<module>:<Model>.<field>"``; none at present); its test fails once the field
exists, so the row is then moved to a sweep field. Values the papers do
not state are set in the sweeps and marked there ``[not in the paper]`` (verl's example
recipes are the reference for them), ``[verl-agent]`` (verl-agent's GiGPO defaults) or
``[derived]`` / ``[reading]`` (computed from, or one reading of, the paper's numbers).

Field paths: ``stages.<stage>.<param>``, ``method_config.<method>.<param>``,
``method_train.<method>.<param>``, or a top-level sweep field (``models``, ``methods``, ...).
``stages.train.<param>`` is read from the train params of every method of the sweep (the
stage block merged with ``method_train``), so a per-method override cannot hide a wrong value;
``updates_per_step`` is what the train config's fields add up to (``TrainConfig.updates_per_step``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Knob:
    sweep: str
    field: str
    value: Any
    where: str                 # the seed's table / section / paragraph
    says: str                  # what the seed states, in a few words
    missing: str = ""          # "<module>:<Model>.<field>" the sweep model lacks; "" = expressible


# the train-stage params every paper sweep must set itself (math; agentic below). Left out on
# purpose: method / method_config / seed (the grid's), threads, verl_overrides, the cluster
# fields nnodes and rollout_tp (one node; tp 1 fits models up to 7B on one GPU in bf16)
TRAIN_KNOBS = ("backend", "steps", "batch_prompts", "lr", "warmup_steps", "weight_decay", "grad_clip",
               "temperature", "top_p", "max_new_tokens", "max_prompt_length", "prompt_template",
               "adv_estimator", "loss_agg_mode", "clip_low", "clip_high", "kl_coef", "ppo_mini_batch_size", "ppo_epochs",
               "micro_batch", "ckpt_every", "val_every", "val_size", "val_samples", "val_temperature",
               "val_top_p", "keep_best", "n_gpus_per_node", "gpu_memory_utilization")
AGENTIC_TRAIN_KNOBS = ("backend", "steps", "batch_prompts", "lr", "grad_clip", "temperature", "top_p", "max_new_tokens",
                       "max_prompt_length", "prompt_template", "adv_estimator", "gamma", "step_weight", "gigpo_mode",
                       "loss_agg_mode", "micro_batch", "ckpt_every", "val_every", "val_size", "layout",
                       "max_episode_tokens", "n_gpus_per_node", "gpu_memory_utilization")


_V = "VIGOR Appendix C"
_VIGOR = [
    Knob("vigor_table1", "models", ["Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-3B", "Qwen/Qwen2.5-7B",
                                    "microsoft/Phi-4-mini-instruct"], _V, "Qwen2.5-1.5B/3B/7B and Phi-4-Mini-Instruct"),
    Knob("vigor_table1", "methods", ["grpo", "greso", "rl_zvp", "vigor"], "VIGOR Section 5.1, Table 1",
         "GRPO, GRESO, RL-ZVP, VIGOR (GRESO-g is GRESO at about twice the rollouts)"),
    Knob("vigor_table1", "benchmarks", ["math500", "aime24", "amc23", "gaokao2023en", "minerva_math", "olympiadbench"],
         "VIGOR Table 1, Appendix C", "Math500, AIME24, AMC, Gaokao, Minerva, OlympiadBench"),
    *(Knob("vigor_table1", f"method_config.vigor.{k}", v, "VIGOR Section 5.1, Appendix C", "T=4, m0=2, gamma=2, alpha=0.5")
      for k, v in (("T", 4), ("m0", 2), ("gamma", 2.0), ("alpha", 0.5))),
    *(Knob("vigor_table1", f"method_config.{m}.n", 8, _V, "baselines use 8 rollouts per prompt")
      for m in ("grpo", "greso", "rl_zvp")),
    Knob("vigor_table1", "method_config.rl_zvp.alpha", 0.1, _V, "RL-ZVP scaling factor alpha = 0.1"),
    Knob("vigor_table1", "stages.prepare_data.source", "math", _V, "1.5B/3B train on the MATH dataset only"),
    Knob("vigor_table1", "stages.train.batch_prompts", 160, _V, "training batch 160 for the 1.5B and 3B models"),
    *(Knob("vigor_table1", f"model_train.{m}.batch_prompts", 640, _V, "training batch 640 for 7B and Phi")
      for m in ("Qwen/Qwen2.5-7B", "microsoft/Phi-4-mini-instruct")),
    Knob("vigor_table1", "model_train.microsoft/Phi-4-mini-instruct.max_prompt_length", 2048, _V, "Phi: prompt 2048"),
    Knob("vigor_table1", "model_train.microsoft/Phi-4-mini-instruct.max_new_tokens", 6144, _V, "Phi: response 6144"),
    Knob("vigor_table1", "stages.train.lr", 1e-6, _V, "AdamW, constant learning rate 1e-6"),
    Knob("vigor_table1", "stages.train.warmup_steps", 0, _V, "constant learning rate (no warm-up)"),
    Knob("vigor_table1", "stages.train.kl_coef", 0.0, "VIGOR Theorem 1; Appendix C coding setup",
         "the KL-free GRPO setup used throughout"),
    Knob("vigor_table1", "stages.train.max_prompt_length", 1536, _V, "Qwen: max prompt length 1536"),
    Knob("vigor_table1", "stages.train.max_new_tokens", 2560, _V, "Qwen: max response length 2560"),
    Knob("vigor_table1", "stages.train.gpu_memory_utilization", 0.5, _V, "rollout engine memory capped at 0.5"),
    Knob("vigor_table1", "stages.train.val_every", 5, _V, "validation every 5 training steps"),
    Knob("vigor_table1", "stages.train.val_samples", 1, _V, "one sampled response per prompt in validation"),
    Knob("vigor_table1", "stages.train.n_gpus_per_node", 8, _V, "main runs on 8xGH200"),
    Knob("vigor_table1", "kubernetes.resources.train.gpus", 8, _V, "main runs on 8xGH200"),
    Knob("vigor_table1", "stages.evaluate.protocol", "vigor", _V, "one sample per prompt, top-p 0.7, temperature 1.0"),
    Knob("vigor_table1", "stages.train.verl_overrides", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
         _V, "reference log-prob micro-batch 32 per GPU"),
    Knob("vigor_table1", "stages.train.verl_overrides", "actor_rollout_ref.ref.fsdp_config.param_offload=true",
         _V, "reference model with parameter offloading"),
    Knob("vigor_table1", "stages.train.verl_overrides", "trainer.critic_warmup=0", _V, "critic warm-up 0"),
    Knob("vigor_table1", "stages.train.ppo_mini_batch_size", 32, _V, "gradient-update mini-batch 32 (1.5B/3B)"),
    *(Knob("vigor_table1", f"model_train.{m}.ppo_mini_batch_size", 64, _V, "gradient-update mini-batch 64 (7B, Phi)")
      for m in ("Qwen/Qwen2.5-7B", "microsoft/Phi-4-mini-instruct")),
    Knob("vigor_table1", "stages.train.updates_per_step", 20, _V,
         "each training step contains 20 gradient-update steps (160 / 32 x 4 passes; 640 / 64 x 2)"),
    *(Knob("vigor_table1", f"model_train.{m}.updates_per_step", 20, _V, "20 gradient-update steps per training step")
      for m in ("Qwen/Qwen2.5-7B", "microsoft/Phi-4-mini-instruct")),
    Knob("vigor_table1", "stages.train.keep_best", "val", "VIGOR Section 5.2, Appendix C",
         "Table 1 from each method's best average-score checkpoint (here: best held-out validation accuracy)"),
    Knob("vigor_table1", "stages.prepare_data.mixtures.math_dapo", ["math", "dapo17k"], _V,
         "7B and Phi train on a mixture of MATH and DAPO data"),
    *(Knob("vigor_table1", f"model_data.{m}", "math_dapo", _V, "7B and Phi train on the MATH+DAPO mixture")
      for m in ("Qwen/Qwen2.5-7B", "microsoft/Phi-4-mini-instruct")),
    Knob("vigor_table1", "stages.train.val_top_p", 0.7, _V, "validation sampling top-p 0.7, temperature 1.0"),
    Knob("vigor_table1", "stages.train.val_temperature", 1.0, _V, "validation sampling top-p 0.7, temperature 1.0"),
]

_P = "VIP summary, Methodology in Plain English"
_VIP = [
    Knob("vip_table", "models", ["Qwen/Qwen2.5-Math-1.5B"], "VIP summary, Main Findings",
         "Qwen2.5-Math-1.5B (the other two base models are not named)"),
    Knob("vip_table", "stages.prepare_data.source", "dapo17k", _P, "train on DAPO-MATH-17k"),
    Knob("vip_table", "benchmarks", ["aime24", "aime25"], _P, "evaluate on AIME2024 and AIME2025"),
    Knob("vip_table", "stages.evaluate.protocol", "vip", _P, "Pass@32, Mean@32, Maj@32"),
    Knob("vip_table", "method_config.vip.base", "rloo", _P, "VIP integrated with RLOO (and Dr. GRPO)"),
    Knob("vip_table", "method_train.grpo.adv_estimator", "rloo", _P, "the baseline is RLOO itself"),
    Knob("vip_table", "method_train.vip.adv_estimator", "rloo", _P, "RLOO+VIP"),
    Knob("vip_table", "method_config.vip.budget_per_prompt", 8, _P, "budget 8xQ (per step: 8 per prompt)"),
    Knob("vip_table", "method_config.grpo.n", 8, _P, "uniform allocation of the same budget"),
    Knob("vip_table", "method_config.vip.embedder", "minilm", _P, "all-MiniLM-L6-v2 prompt embeddings"),
    Knob("vip_table", "method_config.vip.embed_dim", 384, _P, "384-dimensional embeddings"),
    Knob("vip_table", "stages.train.kl_coef", 0.0, "VIP summary, Future Directions", "the zero KL regularization setting"),
    Knob("vip_table", "stages.train.backend", "verl", _P, "the implementation uses VERL for math"),
]

_S = "VSR Appendix D (math setup)"
_VSR = [
    Knob("vsr_table1", "models", ["Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.2-3B-Instruct"], _S,
         "Qwen2.5-7B-Instruct and Llama-3.2-3B-Instruct"),
    Knob("vsr_table1", "stages.prepare_data.source", "openr1", _S, "a hard subset of OpenR1-Math-220k"),
    Knob("vsr_table1", "stages.filter_hard.k", 32, _S, "pass@32 at most 1"),
    Knob("vsr_table1", "stages.filter_hard.c", 1, _S, "pass@32 at most 1"),
    Knob("vsr_table1", "stages.filter_hard.max_prompts", 1000, _S, "the subset contains 1K prompts"),
    Knob("vsr_table1", "stages.train.batch_prompts", 128, "VSR Appendix D.5 Reinforce-Ada-Est paragraph",
         "each update uses 128 prompts"),
    *(Knob("vsr_table1", f"method_config.{m}.n", 8, "VSR Appendix D.5 Reinforce-Ada-Est paragraph",
           "128 x 8 = 1024 responses: group size 8 for GRPO and VSR") for m in ("grpo", "vsr", "static_prefix")),
    *(Knob("vsr_table1", f"method_config.reinforce_ada_est.{k}", v, "VSR Appendix D.5 Reinforce-Ada-Est paragraph",
           "N_x in [4, 32], sum 1024 over 128 prompts") for k, v in (("n_min", 4), ("n_max", 32), ("n_mean", 8))),
    Knob("vsr_table1", "method_config.static_prefix.online_insert", False, "VSR Appendix D.5 (static resets)",
         "a fixed expert-prefix pool, never adding policy prefixes"),
    Knob("vsr_table1", "method_config.static_prefix.scoring", "uniform", "VSR Appendix D.5 (static resets)",
         "sampling uniformly from the pool"),
    Knob("vsr_table1", "method_config.vsr.scoring", "sigma", _S, "replayed prefixes drawn proportional to sigma-hat"),
    Knob("vsr_table1", "stages.evaluate.protocol", "vsr", _S, "16 rollouts over 2 seeds at temperature 0.7"),
    Knob("vsr_table1", "stages.train.n_gpus_per_node", 4, _S, "all experiments on 4 A100 GPUs"),
    Knob("vsr_table1", "kubernetes.resources.train.gpus", 4, _S, "all experiments on 4 A100 GPUs"),
    Knob("vsr_table1", "seeds", [0], "VSR Appendix D.5", "one training run per method"),
    Knob("vsr_table1", "stages.filter_hard.filter_model", "Qwen/Qwen2.5-7B-Instruct", _S,
         "filtered once with Qwen2.5-7B-Instruct; both models train on that subset"),
]

_A = "VSR Appendix D (agentic setup)"
_AGENTIC = [
    Knob("vsr_agentic", "models", ["Qwen/Qwen2.5-1.5B-Instruct"], _A, "Qwen2.5-1.5B-Instruct (3B: a second file)"),
    Knob("vsr_agentic", "methods", ["grpo", "vsr", "vsr_no_scoring", "vsr_no_recency"],
         "VSR Figure 6, Table 2", "GiGPO, GiGPO+VSR, VSR w/o scoring, VSR w/o recency"),
    Knob("vsr_agentic", "stages.train.adv_estimator", "gigpo", _A, "the base RL algorithm is GiGPO"),
    Knob("vsr_agentic", "stages.train.steps", 150, "VSR Appendix D.5 token accounting", "150 matched updates (1.5B)"),
    Knob("vsr_agentic", "stages.train.layout", "serialized", _A, "the policy observes a serialized interaction history"),
    Knob("vsr_agentic", "stages.prepare_data.heldout", 128, _A, "128 fixed map seeds per environment"),
    Knob("vsr_agentic", "seeds", [0, 1, 2], "VSR Appendix D.5 BabyAI runs", "three independent training runs"),
    Knob("vsr_agentic", "stages.train.n_gpus_per_node", 1, _A, "a single H200 GPU"),
    Knob("vsr_agentic", "kubernetes.resources.train.gpus", 1, _A, "a single H200 GPU"),
    *(Knob("vsr_agentic", f"method_config.{m}.scoring", s, "VSR Appendix D (ablations)", w)
      for m, s, w in (("vsr", "sigma", "prefixes sampled in proportion to sigma-hat"),
                      ("vsr_no_scoring", "uniform", "w/o scoring samples prefixes uniformly"))),
]

KNOBS: tuple[Knob, ...] = (*_VIGOR, *_VIP, *_VSR, *_AGENTIC)
PAPER_SWEEPS = ("vigor_table1", "vip_table", "vsr_table1", "vsr_agentic")


def knob_table(sweep: str | None = None) -> list[dict[str, Any]]:
    """The rows as dicts (for docs/papers.md): sweep, field, value, where, says, status."""
    return [{"sweep": k.sweep, "field": k.field, "value": k.value, "where": k.where, "says": k.says,
             "status": f"not yet expressible ({k.missing.split(':')[1]})" if k.missing else "set"}
            for k in KNOBS if sweep in (None, k.sweep)]
