"""Lineage: cache keys, the artifact store, and one MLflow run per stage execution.

``run_stage(name, params, inputs)`` is the single entry point used by the CLI, by
Airflow tasks and by Kubernetes pods. A stage's output is a directory with a
``manifest.json`` of file digests; it appears under its final path only complete
(written to a temporary sibling, then renamed), so a crash never leaves a half
artifact that a later run could mistake for a finished one.

Store locations, cache keys and manifests live in ``components.artifacts``; the MLflow
client, the run-backed Tracker and the sweep parent runs in ``components.tracking``; both
are re-exported here. mlflow is imported lazily (2-3 s) so that light users (the DAG
parser, cache-key helpers, the sweep validator) never pay for it.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import importlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Iterator

from components.artifacts import (MANIFEST, _canonical, _file_digests, _fsync_dir, _strict_json, _uri_path,  # noqa: F401
                                  _write_manifest, artifact_dir, artifact_root, cache_key, file_sha256,
                                  read_manifest, rlvr_home, tracking_uri, tree_digest, verify_manifest, work_dir)
from components.code_fingerprint import code_fingerprint
from components.error_text import one_line, validation_problem
from components.progress import note
from components.stages.base import StageContext
from components import run_card, tracking, tracking_spool
from components.tracking import (_MAX_TAG, MlflowTracker, client, end_sweep_run,  # noqa: F401
                                 ensure_experiment, start_sweep_run)

STAGES: dict[str, str] = {n: f"components.stages.{n}" for n in (
    "prepare_data", "pretrain", "filter_hard", "seed_prefixes",
    "train", "evaluate", "tokens", "tables")}

# JSON {stage name: module path}; lets tests and the CLI swap in toy stages across
# process boundaries (Airflow task processes, `rlvr run-stage` subprocesses).
OVERRIDES_ENV = "RLVR_STAGE_OVERRIDES"
FORCE_ENV = "RLVR_FORCE_STAGE"
SMALL_ARTIFACT_SUFFIXES = {".md", ".csv", ".png", ".json"}
SMALL_ARTIFACT_BYTES = 10 * 1024 * 1024
SYSTEM_METRICS_STAGES = {"train"}   # long enough for CPU / memory curves to say something
CHECKPOINTED_STAGES = {"train"}     # metric rows are sent with the checkpoint that covers them


class StageError(RuntimeError):
    """A stage cannot be run as asked (bad params, missing input). ``str`` is one line;
    for bad params, ``field`` (e.g. ``method_config.rho``) and ``problem`` say what."""

    def __init__(self, msg: str, field: str = "", problem: str = ""):
        super().__init__(msg)
        self.field, self.problem = field, problem


# ---------------------------------------------------------------- registry

def register_stage(name: str, module_path: str) -> None:
    STAGES[name] = module_path


def stage_module_path(name: str, params: dict | None = None) -> str:
    """The module of stage ``name``; a ``task`` in its params must be one the module takes
    (its ``TASKS``; math only when it names none)."""
    overrides = json.loads(os.environ.get(OVERRIDES_ENV) or "{}")
    if name in overrides:
        return overrides[name]
    if name not in STAGES:
        raise StageError(f"unknown stage '{name}' (known: {', '.join(sorted(STAGES))})")
    task = (params or {}).get("task") if isinstance(params, dict) else None
    known = () if task is None else getattr(importlib.import_module(STAGES[name]), "TASKS", ("math",))
    if task is not None and task not in known:
        raise StageError(f"stage '{name}': params.task: unknown task {task!r} (known: {', '.join(known)})",
                         "task", f"unknown task {task!r}")
    return STAGES[name]


def load_stage(name: str, params: dict | None = None):
    """Import the stage lazily. ``pkg.mod`` is a stage module; ``pkg.mod:obj`` names an
    object in it with the same attributes (handy for several toy stages in one file)."""
    path = stage_module_path(name, params)
    mod_path, _, attr = path.partition(":")
    try:
        mod = importlib.import_module(mod_path)
    except ModuleNotFoundError as e:
        if e.name and mod_path.startswith(e.name):  # the stage module itself is missing
            raise StageError(f"stage '{name}': module {mod_path} not found") from None
        raise
    if attr:
        if not hasattr(mod, attr):
            raise StageError(f"stage '{name}': {mod_path} has no attribute {attr}")
        mod = getattr(mod, attr)
    missing = [a for a in ("Params", "VERSION", "run") if not hasattr(mod, a)]
    if missing:
        raise StageError(f"stage '{name}': {path} lacks {', '.join(missing)}")
    return mod


# ---------------------------------------------------------------- locking + cache lookup

@contextlib.contextmanager
def _key_lock(key: str) -> Iterator[None]:
    d = rlvr_home() / "locks"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"{key}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # a second process waits here, then hits the cache
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _lookup(stage: str, key: str, repair: bool) -> dict | None:
    """A cache hit needs both: a FINISHED run tagged with the key (in any experiment: the key
    is content-addressed, so sweeps share results) and a verified artifact."""
    runs = tracking.search_all(f"tags.`rlvr.cache_key` = '{key}' and attributes.status = 'FINISHED'")
    d = artifact_dir(stage, key)
    if not runs or not d.exists():
        return None
    m = read_manifest(d)
    if m and m.get("cache_key") == key and verify_manifest(d):
        return {"stage": stage, "uri": str(d), "digest": m["digest"], "run_id": runs[0].info.run_id,
                "cache_key": key, "cached": True, "summary": _strict_json(m.get("summary", {}))}
    if repair:  # never use a tampered/partial artifact; keep it for inspection
        stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S")
        os.rename(d, d.with_name(f"{d.name}.corrupt-{stamp}-{uuid.uuid4().hex[:6]}"))
    return None


# ---------------------------------------------------------------- run_stage

def check_params(name: str, params: dict, mod=None):
    """The stage's validated Params, or StageError with one line naming the field."""
    from pydantic import ValidationError
    mod = mod or load_stage(name, params)
    try:
        return mod.Params.model_validate(params or {})
    except ValidationError as e:
        field, problem = validation_problem(e, unknown="unknown parameter")
        raise StageError(f"stage '{name}': params.{field}: {problem}", field, problem) from None


def _resolve_inputs(name: str, mod, inputs: dict[str, str]) -> dict[str, tuple[Path, dict]]:
    import fnmatch
    declared = list(getattr(mod, "INPUTS", None) or [])
    # Names with glob characters ("run_*") describe open families of inputs; others are required.
    for req in (n for n in declared if not any(ch in n for ch in "*?[")):
        if req not in inputs:
            raise StageError(f"stage '{name}': missing input '{req}' (given: {', '.join(sorted(inputs)) or 'none'})")
    if declared and not all(any(fnmatch.fnmatch(n, pat) for pat in declared) for n in inputs):
        bad = [n for n in inputs if not any(fnmatch.fnmatch(n, pat) for pat in declared)]
        raise StageError(f"stage '{name}': unexpected input '{bad[0]}' (declared: {', '.join(declared)})")
    out = {}
    for n, uri in sorted(inputs.items()):
        p = _uri_path(str(uri))
        m = read_manifest(p)
        if m is None or not verify_manifest(p):
            why = "no manifest.json" if m is None else "files do not match manifest.json"
            raise StageError(f"stage '{name}': input '{n}': {p} is not a finished artifact ({why})")
        out[n] = (p, m)
    return out


def run_stage(name: str, params: dict, inputs: dict[str, str] | None = None, sweep: str = "default",
              parent_run_id: str | None = None, force: bool = False, cell: dict | None = None) -> dict:
    """``cell``: the DAG cell the call is for (model, method, seed, key, label, benchmark);
    it names the MLflow run and tags it (``components.run_card``), never the cache key."""
    force = force or forced(name, cell)
    mod = load_stage(name, params)
    p = check_params(name, params, mod)
    resolved = _resolve_inputs(name, mod, inputs or {})
    pdict = p.model_dump(mode="json")
    code = code_fingerprint(stage_module_path(name, params))
    key = cache_key(name, mod.VERSION, pdict, {n: m["digest"] for n, (_, m) in resolved.items()}, code)
    exp_id = ensure_experiment(sweep)
    if not force and (hit := _lookup(name, key, repair=False)):
        note(f"[rlvr] {name}: cached ({key[:12]})")
        return hit
    with _key_lock(key):
        if not force and (hit := _lookup(name, key, repair=True)):
            return hit  # computed by a concurrent process while we waited
        note(f"[rlvr] {name}: running ({key[:12]})")
        t0 = time.monotonic()
        res = _compute(name, mod, p, pdict, resolved, key, exp_id, sweep, parent_run_id, cell, code=code)
        note(f"[rlvr] {name}: finished in {time.monotonic() - t0:.0f}s")
        return res


def forced(name: str, cell: dict | None) -> bool:
    """``RLVR_FORCE_STAGE=<stage>[@<cell label>]`` recomputes that stage (that cell), despite
    the cache: `rlvr rerun` of an in-process sweep (downstream then reruns as the cache decides)."""
    stage, _, label = os.environ.get(FORCE_ENV, "").partition("@")
    return stage == name and (not label or label in {str((cell or {}).get(k)) for k in ("key", "label")})


def cache_key_of(name: str, params: dict, inputs: dict[str, str]) -> str:
    """The cache key ``run_stage(name, params, inputs)`` would use now: today's stage code
    (VERSION, code fingerprint) and defaults, and the digests that the inputs' manifests
    record (not re-verified here; ``cached`` verifies an output). StageError when the stage,
    its params or an input's manifest is not there."""
    mod = load_stage(name, params)
    pdict = check_params(name, params, mod).model_dump(mode="json")
    digests = {}
    for n, uri in sorted(inputs.items()):
        m = read_manifest(_uri_path(str(uri)))
        if m is None:
            raise StageError(f"stage '{name}': input '{n}' is gone ({uri})")
        digests[n] = m["digest"]
    return cache_key(name, mod.VERSION, pdict, digests, code_fingerprint(stage_module_path(name, params)))


def cached(name: str, key: str) -> dict | None:
    """``run_stage``'s result for ``key`` when it is a verified cache hit (a FINISHED run and
    an intact artifact), else None. Changes nothing: a damaged artifact stays where it is."""
    return _lookup(name, key, repair=False)


def _compute(name, mod, p, pdict, resolved, key, exp_id, sweep, parent_run_id, cell=None, code="") -> dict:
    c = client()
    final = artifact_dir(name, key)
    upstream = _upstream_runs(resolved)
    ident = run_card.identity(name, pdict, cell, upstream)
    tags = {"rlvr.stage": name, "rlvr.cache_key": key, "rlvr.sweep": sweep,
            "rlvr.version": str(mod.VERSION), "rlvr.code": code, "mlflow.runName": run_card.run_name(name, ident),
            "rlvr.inputs": _canonical({n: m.get("run_id") for n, (_, m) in resolved.items()})[:_MAX_TAG],
            **run_card.tags(ident), **run_card.source_tags(f"rlvr run-stage {name}"),
            "mlflow.note.content": run_card.description(name, mod.VERSION, sweep, key, final, upstream)[:_MAX_TAG]}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    wd = work_dir(name, key)
    run_id = tracking.resume_attempt(exp_id, key, wd, tags) or \
        c.create_run(exp_id, tags={**tags, "rlvr.attempt": "1"}, run_name=tags["mlflow.runName"]).info.run_id
    _close_dead_attempts(key, run_id)
    tracker = MlflowTracker(run_id, spool_dir=wd / tracking_spool.SPOOL_DIR,   # an outage spools, never fails
                            hold_until_commit=name in CHECKPOINTED_STAGES)
    if (ckpt := tracking.latest_checkpoint(wd)) is not None:   # the trainer logs step s's row as step s+1, then saves step-s
        tracker.recover_held(int(ckpt.removeprefix("step-")) + 1)
    # a killed attempt (kill -9, OOM) leaves its temporary dir behind; we hold the key's
    # lock, so no other process is writing one: clear them before starting afresh
    for stale in final.parent.glob(f"{final.name}.tmp-*") if final.parent.is_dir() else ():
        shutil.rmtree(stale, ignore_errors=True)
    tmp = final.with_name(f"{final.name}.tmp-{uuid.uuid4().hex}")
    placed = False
    try:
        tracker.log_params({name: pdict})   # "train.seed", "evaluate.temperature": one namespace per stage
        _log_inputs(run_id, resolved)
        tmp.mkdir(parents=True)
        wd.mkdir(parents=True, exist_ok=True)
        ctx = StageContext(out_dir=tmp, work_dir=wd, inputs={n: path for n, (path, _) in resolved.items()},
                           tracker=tracker, cache_key=key, sweep=sweep)
        with tracking.system_metrics(run_id, enabled=name in SYSTEM_METRICS_STAGES):
            summary = _strict_json(mod.run(p, ctx) or {})
        files = _file_digests(tmp)
        manifest = {"stage": name, "version": mod.VERSION, "code": code, "cache_key": key, "params": pdict,
                    "inputs": {n: {"uri": str(path), "digest": m["digest"], "run_id": m.get("run_id")}
                               for n, (path, m) in resolved.items()},
                    "files": files, "digest": tree_digest(files), "summary": summary, "run_id": run_id,
                    "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat()}
        _write_manifest(tmp, manifest)  # last: its presence marks the artifact complete
        _move_into_place(tmp, final)
        placed = True
        tracker.close("FINISHED", tags={"rlvr.output_uri": str(final), "rlvr.digest": manifest["digest"]},
                      outputs={"stage": name, "final": str(final), "ident": ident, "sweep": sweep, "key": key,
                               "summary": summary, "upstream": upstream})
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        # a tracking outage at the end keeps the complete artifact: its spool (ending FINISHED) replays later
        spooled = isinstance(e, tracking_spool.TrackingUnavailable)
        if placed and not spooled:  # its run is not FINISHED: a verified manifest must not outlive it
            shutil.rmtree(final, ignore_errors=True)
        err = _disk_error(name, e, tmp)
        with contextlib.suppress(Exception):
            if not spooled:
                tracker.close("KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED",
                              tags={"rlvr.error": one_line(f"{type(err or e).__name__}: {err or e}", 500)},
                              wait=0)   # a failed stage does not wait for the server: its spool stays
        if err is not None:
            raise err from e
        raise
    shutil.rmtree(work_dir(name, key), ignore_errors=True)  # checkpoints are moot once final
    return {"stage": name, "uri": str(final), "digest": manifest["digest"], "run_id": run_id,
            "cache_key": key, "cached": False, "summary": summary}


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO}


def _disk_error(stage: str, e: BaseException, tmp: Path) -> OSError | None:
    """A full / read-only / failing disk, as one line naming the stage and where it was
    writing (``write()`` errors carry no file name). Still an OSError with its errno, so
    that a retry (after space is freed) remains possible."""
    if not isinstance(e, OSError) or e.errno not in _DISK_ERRNOS:
        return None
    where = e.filename or tmp
    return OSError(e.errno, f"stage '{stage}': cannot write its artifact ({os.strerror(e.errno)}) at {where}; "
                            "nothing was marked finished")


def _close_dead_attempts(key: str, run_id: str) -> None:
    """Runs of this key still RUNNING belong to attempts that died without closing them
    (kill -9, OOM, lost pod): we hold the key's lock, so none is alive. Mark them FAILED."""
    c = client()
    for r in tracking.search_all(f"tags.`rlvr.cache_key` = '{key}' and attributes.status = 'RUNNING'", 1000):
        if r.info.run_id != run_id:
            with contextlib.suppress(Exception):
                c.set_tag(r.info.run_id, "rlvr.error", f"attempt died before finishing; superseded by run {run_id}")
                c.set_terminated(r.info.run_id, "FAILED")


def _move_into_place(tmp: Path, final: Path) -> None:
    old = None
    if final.exists():  # stale (unverified, or no FINISHED run): replace it, never merge
        old = final.with_name(f"{final.name}.old-{uuid.uuid4().hex}")
        os.rename(final, old)
    os.rename(tmp, final)  # same directory, same filesystem: atomic
    _fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _log_inputs(run_id: str, resolved: dict[str, tuple[Path, dict]]) -> None:
    if not resolved:
        return
    from mlflow.entities import Dataset, DatasetInput, InputTag
    ds = [DatasetInput(Dataset(name=n, digest=m["digest"][:36], source_type="local",  # digest max 36
                               source=_canonical({"uri": path.as_uri()})),
                       tags=[InputTag("mlflow.data.context", n), InputTag("rlvr.stage", str(m.get("stage")))])
          for n, (path, m) in resolved.items()]
    from mlflow.exceptions import MlflowException
    for attempt in range(3):
        try:
            client().log_inputs(run_id, datasets=ds)
            return
        except MlflowException as e:
            # The store's get-or-create of a dataset is not atomic: two tasks logging the same
            # input at once (parallel train tasks on a tracking server) -> one unique-key error;
            # the retry finds the dataset the other one created.
            if attempt == 2 or "dataset_pk" not in str(e) and "UNIQUE constraint failed: datasets" not in str(e):
                raise
            time.sleep(0.2 * (attempt + 1))


def _upstream_runs(resolved: dict[str, tuple[Path, dict]]) -> dict[str, dict]:
    """Per input: its stage, params, run id / experiment / name / tags (for naming and
    linking the new run; a run this store does not know leaves those empty)."""
    from mlflow.exceptions import MlflowException
    out = {}
    for n, (path, m) in resolved.items():
        u = {"stage": m.get("stage"), "params": m.get("params") or {}, "uri": str(path), "tags": {},
             "run_id": "", "experiment_id": "", "name": ""}
        if m.get("run_id"):
            with contextlib.suppress(MlflowException):
                r = client().get_run(m["run_id"])
                u.update(run_id=r.info.run_id, experiment_id=r.info.experiment_id, name=r.info.run_name,
                         tags={k: v for k, v in r.data.tags.items() if k.startswith("rlvr.")})
        out[n] = u
    return out


def log_outputs_record(run_id: str, rec: dict) -> None:
    """A spooled ``outputs`` record (``MlflowTracker.close``) sent to its run: small files as
    artifacts, CSVs also as MLflow tables, a policy's weights (and, for a trained one, a
    registered model version); an evaluation's numbers also on its policy's run."""
    tracker, name, final, ident = MlflowTracker(run_id), rec["stage"], Path(rec["final"]), rec["ident"]
    weights = tracking.WEIGHTS_DIR.get(name)
    for p in sorted(final.rglob("*")):
        if weights and p.relative_to(final).parts[0] == weights and (final / weights).is_dir():
            continue   # logged whole by tracking.log_weights
        if p.is_file() and p.suffix in SMALL_ARTIFACT_SUFFIXES and p.stat().st_size < SMALL_ARTIFACT_BYTES:
            rel_parent = p.parent.relative_to(final).as_posix()
            tracker.log_artifact(p, None if rel_parent == "." else rel_parent)
    tracking.log_tables(tracker.run_id, final, SMALL_ARTIFACT_BYTES)
    source = tracking.log_weights(tracker, name, final)
    if name == "train" and source:
        tracking.register_policy(tracker.run_id, rec["sweep"], ident, source, rec["key"])
    policy = rec["upstream"].get("model", {})
    if name == "evaluate" and policy.get("run_id") and "mean_at_k" in rec["summary"]:
        tracking.copy_evaluation(policy["run_id"], tracker.run_id, ident, rec["summary"])


tracking_spool.SENDERS["outputs"] = log_outputs_record
