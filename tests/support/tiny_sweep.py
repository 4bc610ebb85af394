"""The tiny math sweep of the end-to-end tests (a 1-layer policy, a few dozen problems: seconds
per stage on a CPU), built from its parts so that each test states only what it changes."""
from __future__ import annotations

import yaml

STAGES = {
    "prepare_data": {"pretrain_size": 1500, "pool_size": 48, "heldout_pool_size": 24, "operand_digits": 1,
                     "pretrain_levels": {3: 0.5, 4: 0.5}, "pool_levels": {5: 0.5, 6: 0.5},
                     "probe_per_level": 8, "probe_levels": [3, 6]},
    "filter_hard": {"k": 4, "c": 1, "round_size": 2, "max_heldout": 12, "max_new_tokens": 64},
    "train": {"steps": 3, "batch_prompts": 4, "max_new_tokens": 64, "val_size": 4, "val_samples": 1, "ckpt_every": 2},
    "evaluate": {"samples_per_seed": 2, "seeds": [0, 1], "max_new_tokens": 64, "pass_ks": [1, 4]},
}
METHOD_CONFIG = {"grpo": {"n": 4}, "vsr": {"n": 4, "rho": 0.5}}


def tiny_sweep(name: str, methods=("grpo", "vsr"), pretrain: dict | None = None,
               method_config: dict | None = None, **stages: dict) -> str:
    """The sweep file's text; ``stages`` entries are merged over the stage's defaults above,
    ``pretrain`` over the tiny model's."""
    spec = {"steps": 40, "batch_size": 64, "policy": {"layers": 1, "hidden": 64, "ffn": 128}, **(pretrain or {})}
    cfg = {"name": name, "seeds": [0], "models": ["tiny"], "model_specs": {"tiny": spec}, "methods": list(methods),
           "stages": {k: {**STAGES.get(k, {}), **stages.get(k, {})} for k in {**STAGES, **stages}},
           "method_config": {m: (method_config or {}).get(m, METHOD_CONFIG.get(m, {})) for m in methods},
           "retries": 0}
    return yaml.safe_dump(cfg, sort_keys=False)
