"""The verl cases of the scale tests, from the method registry: which methods run (every
registered one of a task), which are strict xfails and why, and the invariants every run
keeps (imported by test_verl_cpu.py and test_verl_agentic.py)."""
from __future__ import annotations

from pathlib import Path

import pytest


def registry_cases(task: str, configs: dict[str, dict]) -> list:
    """Every registered method of ``task`` (a method added later is a case without editing a
    test), with ``configs``' small config where one is named, else the method's defaults; a
    method refused on verl (``cells.verl_form_refusal`` with the case's config) is a strict xfail
    raising the stage's refusal and naming what is missing, so the day one is wired its case
    passes and fails as an XPASS."""
    from components.methods.registry import available
    from components.trainer.verl.cells import verl_form_refusal

    out = []
    for m in available(task):
        marks = ()
        why = verl_form_refusal(m, configs.get(m))
        if why is not None:
            marks = pytest.mark.xfail(strict=True, raises=ValueError, reason=why)
        out.append(pytest.param(m, configs.get(m, {}), id=m, marks=marks))
    return out


def check_method_invariants(out: Path, method: str, method_config: dict, batch: int, task: str) -> list[dict]:
    """The method's own contract on verl, from the stage's records: per step, the sequences
    generated are what the method's budget promises (``rollouts_per_step``), or, for a method
    that reports its spend (``method/rollouts``: DAPO's refills, SARA's abandoned rollouts,
    CERO's global budget), what it reports; and the token accounting is the embedded
    trainer's (``loop.training_tokens``: kept + discarded per step, their sum the summary's
    total, the tokens file the same numbers)."""
    import json

    from components.methods.registry import build

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollouts" in r]
    summary = json.loads((out / "summary.json").read_text())
    meter = json.loads((out / "tokens.json").read_text())
    m = build(method, method_config, task=task)
    for r in steps:
        spent = r.get("method/rollouts")
        if task == "math":          # an episode's turns vary; its budget is the episodes per start
            want = spent if spent is not None else m.rollouts_per_step(batch)
            assert r["rollouts"] == want, (method, r["step"], r["rollouts"], want)
        by_step = [x for x in meter if x.get("step") == r["step"] - 1 and x["purpose"] in ("train_rollout", "discarded")]
        assert r["tokens/generated"] == sum(x["generated_tokens"] for x in by_step), (method, r["step"])
        assert r["tokens/discarded"] == sum(x["generated_tokens"] for x in by_step if x["purpose"] == "discarded")
        if task == "math":
            assert r["rollouts"] == sum(x["sequences"] for x in by_step), (method, r["step"])
    total = sum(x["generated_tokens"] for x in meter if x["purpose"] in ("train_rollout", "discarded"))
    assert summary["generated_tokens"] == total == sum(r["tokens/generated"] for r in steps)
    assert steps[-1]["tokens/generated_cum"] == total
    return rows


def kill_after_first_checkpoint(params: dict, inputs: dict, log: Path) -> tuple[list[str], Path]:
    """``rlvr run-stage train`` in its own process group, SIGKILLed (the stage, its Ray head and
    everything it started) once verl has written a checkpoint; returns the command, to run again,
    and the killed run's work directory (named by its cache key)."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "components.cli", "run-stage", "train", "--params", json.dumps(params),
           "--inputs", json.dumps(inputs), "--sweep", "scale"]
    works = Path(os.environ["RLVR_HOME"]) / "work" / "train"
    before = set(works.glob("*")) if works.is_dir() else set()
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    deadline, work = time.monotonic() + 1200, None
    while time.monotonic() < deadline and proc.poll() is None:
        new = [w for w in works.glob("*") if w not in before] if works.is_dir() else []
        if new and (new[0] / "verl_checkpoints" / "latest_checkpointed_iteration.txt").is_file():
            work = new[0]
            break
        time.sleep(2)
    assert work is not None, f"no verl checkpoint before the deadline; log:\n{log.read_text()[-3000:]}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return cmd, work
