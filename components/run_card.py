"""What a person reads in MLflow about one stage run: who it is for (the grid cell's
``rlvr.model`` / ``rlvr.method`` / ``rlvr.seed`` / ``rlvr.label`` tags, the same on every
stage run of a cell so that the UI's "Group by" joins training and evaluation), a
readable run name (``train tiny vsr s0``, ``evaluate tiny base``, ``filter_hard tiny``;
the cache key stays a tag) and a description (``mlflow.note.content``) linking the
upstream runs. Light: no mlflow import; the caller fetches the upstream runs' tags.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path
from typing import Any

CELL_TAGS = ("model", "method", "seed", "label")
REPO = Path(__file__).resolve().parents[1]
COMMIT_FILE = REPO / "components" / "GIT_COMMIT"


def _slug(text: str) -> str:
    from components.sweep import slug
    return slug(text)


def identity(stage: str, params: dict, cell: dict | None, upstream: dict[str, dict]) -> dict[str, str]:
    """{model, method, seed, label[, benchmark]} of one stage run, as far as known.

    ``cell``: what the caller says (the DAG's grid / eval cell: model, method, seed, key,
    label, benchmark) wins; then the stage's own params (train's method and seed); then
    what every upstream run carrying the tag agrees on (an evaluation inherits its trained
    policy's cell; a table over three methods inherits none). ``upstream``: input name ->
    {stage, params, tags} of that input (its manifest's stage and params, its run's tags)."""
    cell = {k: v for k, v in (cell or {}).items() if v is not None}
    out: dict[str, Any] = {}
    cells = [u["tags"] for u in upstream.values() if "rlvr.label" in u["tags"]]
    for k in CELL_TAGS:
        agreed = {u["tags"][f"rlvr.{k}"] for u in upstream.values() if f"rlvr.{k}" in u["tags"]}
        # the model when all agree; the rest only from a single upstream cell (not a table's many)
        if len(agreed) == 1 and (k == "model" or len(cells) == 1):
            out[k] = agreed.pop()
    if stage == "pretrain" and params.get("model"):
        out["model"] = params["model"]       # a hub id / path: the model's own name
    if stage == "train":
        out.update(method=params.get("method"), seed=params.get("seed"))
    label = str(cell.get("key") or cell.get("label") or "")
    if stage == "evaluate":
        label = label or str(params.get("label") or "")
        bench = cell.get("benchmark") or params.get("benchmark") or label.partition("@")[2]
        if bench:
            out["benchmark"] = bench
        policy = upstream.get("model", {})
        if policy.get("stage") == "pretrain":   # the base policy, not a trained one
            out.update(method="base")
            out.pop("seed", None)
        elif policy.get("stage") == "train":    # also for policies trained before these tags
            out.update(method=policy["params"].get("method"), seed=policy["params"].get("seed"))
    out.update({k: cell[k] for k in ("model", "method", "seed") if k in cell})
    label = label.partition("@")[0]
    if not label and out.get("model") and out.get("method"):
        label = "-".join([_slug(str(out["model"])), str(out["method"])]
                         + ([f"s{out['seed']}"] if out.get("seed") is not None else []))
    if label:
        out["label"] = label
    return {k: str(v) for k, v in out.items() if v is not None}


def tags(ident: dict[str, str]) -> dict[str, str]:
    return {f"rlvr.{k}": v for k, v in ident.items()}


def run_name(stage: str, ident: dict[str, str]) -> str:
    parts = [stage] + [ident[k] for k in ("model", "method") if k in ident]
    if "seed" in ident:
        parts.append(f"s{ident['seed']}")
    if "benchmark" in ident:
        parts.append(f"@{ident['benchmark']}")
    return " ".join(parts)


# MLflow 3's UI opens in its GenAI view unless the address says otherwise; there a run
# without a logged model (every stage run but training) is listed under "Evaluations".
ML_VIEW = "workflowType=machine_learning"


def run_link(experiment_id: str, run_id: str) -> str:
    """A link the MLflow UI (a hash-routed page) resolves against its own address, in its
    machine-learning view (the run under "Runs", not "Evaluations")."""
    return f"#/experiments/{experiment_id}/runs/{run_id}?{ML_VIEW}"


def description(stage: str, version: Any, sweep: str, key: str, output: Path,
                upstream: dict[str, dict]) -> str:
    """Markdown for ``mlflow.note.content``. ``upstream``: input name -> {run_id,
    experiment_id, name, uri} (run_id / experiment_id empty when the run is unknown)."""
    lines = [f"Stage `{stage}` (version {version}) of sweep `{sweep}`; cache key `{key}`.", "",
             f"Output artifact: `{output}`", ""]
    if upstream:
        lines.append("Inputs:")
        for n, u in sorted(upstream.items()):
            who = f"[{u['name']}]({run_link(u['experiment_id'], u['run_id'])})" if u.get("run_id") else "(no run)"
            lines.append(f"- `{n}`: {who}, `{u['uri']}`")
    if commit := git_commit():
        lines += ["", f"Code: git commit `{commit}`"]
    return "\n".join(lines)


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The code's commit: ``RLVR_GIT_COMMIT`` (an image), else the one ``git archive`` wrote into
    ``components/GIT_COMMIT`` (a snapshot; ``.gitattributes`` export-subst), else the checkout's
    HEAD. A tree that is neither has none: the HEAD of a repository around it is not its code."""
    if env := os.environ.get("RLVR_GIT_COMMIT"):
        return env
    try:
        stamped = COMMIT_FILE.read_text(encoding="utf-8").strip()
    except OSError:
        stamped = ""
    if re.fullmatch(r"[0-9a-f]{40}", stamped):
        return stamped
    if not (REPO / ".git").exists():
        return None
    try:
        r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


# the instruction-set extensions that choose float32 kernels in torch (ATen's CPU capability),
# oneDNN and MKL: the same commit on CPUs that differ in them rounds some sums differently, and
# a sampled token that flips changes a run from there on
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile")


@functools.lru_cache(maxsize=1)
def cpu() -> str:
    """The CPU as the float arithmetic sees it: its model name, the ISA extensions above and a
    digest of all its feature flags (Linux's /proc/cpuinfo; elsewhere the platform's names)."""
    import hashlib
    import platform

    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{platform.processor() or platform.machine()}, {platform.system()}"
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags") or fields.get("Features") or ""
    isa = " ".join(f for f in ISA_FLAGS if f in flags.split()) or "no avx2"
    digest = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:8]
    return f"{fields.get('model name') or platform.machine()}, {isa}, flags {digest}"


def source_tags(entry: str) -> dict[str, str]:
    """MLflow's own source tags (the commit and what ran the stage) and the CPU it ran on."""
    out = {"mlflow.source.name": entry, "mlflow.source.type": "JOB", "rlvr.cpu": cpu()}
    if commit := git_commit():
        out["mlflow.source.git.commit"] = commit
    return out
