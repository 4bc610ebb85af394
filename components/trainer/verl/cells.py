"""What sweep validation checks of a sweep's verl train cells, before any GPU is asked for.

* a method (or a method config) with no verl form is refused on ``backend: verl``: PG-OPD's
  top-k probe (``overlap: topk``) needs the student's top-k log-probs from the rollout, which
  verl's vLLM server does not return; SFT trains through verl's SFT trainer (``sft.py``);
* on the GPU path (``executor: kubernetes``) every verl cell's per-GPU memory estimate
  (``memory.py``) must fit its declared GPUs (``n_gpus_per_node x nnodes`` of ``gpu_memory_gib``).

Torch-free and verl-free: it runs at DAG-parse time (``components/sweep.py``).
"""
from __future__ import annotations

from typing import Any

from components.error_text import FieldError
from components.trainer.verl.memory import estimate

DEFAULT_GPU_MEMORY_GIB = 80.0
# per-token-advantage methods the verl update can compute (advantages.TOKEN_ADVANTAGES, which
# imports torch; tests/trainer/test_verl_advantages.py checks the two agree)
VERL_TOKEN_METHODS = ("rl_zvp", "opd", "pg_opd")


_TOKEN_LOSS = ("its advantages are per token, computed from the policy inside the loss, which verl's "
               "actor loss does not take")
_TOPK_PROBE = ("overlap: topk needs the student's top-k log-probs in the probe window, which verl's vLLM "
               "server does not return (vLLMHttpServer.generate sets logprobs to 0 or None); use overlap: "
               "sampled, or prune: false")
# Sweep validation runs where the method modules cannot be imported (the kfp environment has no
# numpy or torch), so the refusals are a table by registered name (and, for PG-OPD, its probe's
# config with the defaults of PGOPDConfig); refusal_from_class derives them from the classes and
# tests/trainer/test_verl_cells.py checks the two agree for every registered method, so a method
# added later without a verl form fails that test, not a GPU job.
NO_VERL_FORM: dict[str, str] = {}
TOPK_PROBE_DEFAULTS = {"pg_opd": {"prune": True, "overlap": "topk"}, "opd": {"prune": False, "overlap": "topk"}}


def verl_form_refusal(method: str, method_config: dict | None = None) -> str | None:
    """Why ``method`` (with ``method_config``, default: the method's defaults) cannot train on
    verl, or None when it can."""
    if method in TOPK_PROBE_DEFAULTS:
        c = {**TOPK_PROBE_DEFAULTS[method], **(method_config or {})}
        if c["prune"] and c["overlap"] == "topk":
            return _TOPK_PROBE
    return NO_VERL_FORM.get(method)


def refusal_from_class(method: str) -> str | None:
    """The same answer for the method's default config, from its class (imports it: numpy,
    maybe torch)."""
    from components.methods.registry import entry, method_class

    cls = method_class(method)
    if cls.per_token_advantages and method not in VERL_TOKEN_METHODS:
        return _TOKEN_LOSS
    c = cls.Config(**entry(method).overrides)
    if getattr(c, "prune", False) and getattr(c, "overlap", None) == "topk":
        return _TOPK_PROBE
    return None


def _where(sweep, method: str, key: str, model: str | None = None) -> str:
    if key in sweep.method_train.get(method, {}):
        return f"method_train.{method}.{key}"
    if key in sweep.model_train.get(model, {}):
        return f"model_train.{model}.{key}"
    return f"stages.train.{key}"


def verl_cells(sweep, agentic: bool = False) -> list[dict[str, Any]]:
    """The grid cells whose train stage runs on verl, with their merged params: the math task's,
    and with ``agentic`` the episode task's too (the memory check covers both)."""
    out = []
    for cell in sweep.grid():
        params = sweep.train_params(cell["method"], cell["seed"], cell["model"])
        if params.get("backend") == "verl" and (agentic or sweep.task_of(cell["method"]) is None):
            out.append({**cell, "params": params})
    return out


def memory_of(cell: dict[str, Any]) -> dict[str, Any] | None:
    p = cell["params"]
    return estimate(cell["model"], p, float(p.get("gpu_memory_gib", DEFAULT_GPU_MEMORY_GIB)))


def check(sweep) -> None:
    """Raise ``FieldError`` (one line: field, method, backend, reason) for the first bad cell."""
    seen = set()
    for cell in verl_cells(sweep, agentic=True):
        m = cell["method"]
        if m not in seen:
            seen.add(m)
            why = verl_form_refusal(m, cell["params"].get("method_config"))
            if why is not None:
                raise FieldError(_where(sweep, m, "backend"),
                                 f"method {m!r} has no verl form ({why}); run it with backend: embedded")
        if sweep.executor != "kubernetes":
            continue
        est = memory_of(cell)
        if est is not None and est["refusal"] is not None:
            raise FieldError(_where(sweep, m, "micro_batch", cell["model"]),
                             f"cell {cell['key']} (backend verl) cannot fit its GPUs: {est['refusal']}")


def memory_report(sweep) -> dict[str, Any]:
    """Every verl cell's estimate (``cells``: key -> estimate or None) and one line each, for the
    k8s dry run (``components/k8s/dryrun.py``)."""
    from components.trainer.verl.memory import line

    cells, lines = {}, []
    for cell in verl_cells(sweep, agentic=True):
        est = memory_of(cell)
        cells[cell["key"]] = est
        lines.append(f"{cell['key']}: " + (line(est) if est else f"{cell['model']}: no architecture facts "
                                             "(components/trainer/verl/memory.py KNOWN, or a local config.json)"))
    return {"cells": cells, "lines": lines}
