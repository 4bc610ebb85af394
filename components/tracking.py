"""MLflow side of lineage: one client per tracking URI, experiments with an explicit
artifact location, the stage ``Tracker`` backed by one run (addressed by id), the parent
run of a sweep, and what a stage run carries besides its params and metrics: system
metrics while training, the trained policy (``components.tracking_models``), its
results as MLflow tables, and an evaluation's numbers copied onto the evaluated policy's
run (so that one runs table compares methods). mlflow itself is imported lazily (2-3 s).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import re
import time
from pathlib import Path
from typing import Any

from components import tracking_spool
from components.tracking_spool import client  # noqa: F401 - the API's client, here for its callers
from components.artifacts import _canonical, artifact_root, tracking_uri
from components.error_text import one_line

# MLflow limits (mlflow.utils.validation): keys 250, param values 6000, tags 8000.
_MAX_KEY, _MAX_PARAM, _MAX_TAG = 250, 6000, 8000
# Without this tag MLflow 3's UI treats an experiment as GenAI and opens an empty overview.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
TABLES_RUN_TAG = "rlvr.tables_run"   # on a sweep run: the tables stage run its result is (see latest_tables_run)


# ---------------------------------------------------------------- mlflow helpers
def _clock(ms: int) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _span(s: float) -> str:
    h, rest = divmod(int(round(s)), 3600)
    return (f"{h}h " if h else "") + f"{rest // 60}m {rest % 60:02d}s"


def wall_time_text(start_ms: int, closes: list) -> str:
    """The whole sweep run, first start to last end, over each time it was closed (a clear and
    rerun closes it again): Airflow's run header shows only the last rerun's time."""
    text = f"{_span((closes[-1][1] - start_ms) / 1000)} from {_clock(start_ms)} to {_clock(closes[-1][1])}"
    if len(closes) > 1:
        text += f"; closed {len(closes)} times: " + ", ".join(f"{st} at {_clock(t)}" for st, t in closes)
    return text


def _send_batch(run_id: str, rec: dict) -> None:
    """A spooled metrics / params / tags record, within MLflow's per-call limits (1000 metrics,
    100 params or tags)."""
    from mlflow.entities import Metric, Param, RunTag

    kind = rec["kind"]
    make, size = {"metrics": (lambda x: Metric(x[0], x[1], x[2], x[3], model_id=x[4] if len(x) > 4 else None), 1000),
                  "params": (lambda x: Param(x[0], x[1]), 100), "tags": (lambda x: RunTag(x[0], x[1]), 100)}[kind]
    items = [make(x) for x in rec["items"]]
    for i in range(0, len(items), size):
        client().log_batch(run_id, **{kind: items[i:i + size]})


def _send_end(run_id: str, rec: dict) -> None:
    client().set_terminated(run_id, rec["status"], end_time=rec["ts"])


tracking_spool.SENDERS.update(metrics=_send_batch, params=_send_batch, tags=_send_batch, end=_send_end)


def ensure_experiment(name: str) -> str:
    from mlflow.exceptions import MlflowException
    c = client()
    exp = c.get_experiment_by_name(name)
    if exp is None:
        # Explicit location: otherwise MLflow puts artifacts under ./mlruns of the cwd.
        # A remote tracking server chooses its own (proxied) location.
        loc = None if tracking_uri().startswith(("http:", "https:", "databricks")) else artifact_root().as_uri()
        try:
            return c.create_experiment(name, artifact_location=loc, tags=EXPERIMENT_KIND)
        except MlflowException:  # created concurrently by another process
            exp = c.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        c.restore_experiment(exp.experiment_id)
    for k, v in EXPERIMENT_KIND.items():  # experiments made before the tag existed
        if exp.tags.get(k) != v:
            c.set_experiment_tag(exp.experiment_id, k, v)
    return exp.experiment_id


# MLflow refuses a param name with any other character (its server: INVALID_PARAMETER_VALUE);
# a claim id such as "vsr>grpo" in a pre-registration block is one
_KEY_CHAR = re.compile(r"[^A-Za-z0-9_\-. :/]")
_KEY_WORDS = {">": "_gt_", "<": "_lt_", "=": "_eq_"}


def _param_key(k: str) -> str:
    return _KEY_CHAR.sub(lambda m: _KEY_WORDS.get(m.group(0), "_"), k)


def _flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{_param_key(str(k))}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key[:_MAX_KEY]] = (v if isinstance(v, str) else _canonical(v))[:_MAX_PARAM]
    return out


class MlflowTracker:
    """The stage Tracker backed by one MLflow run, addressed by id (never the
    fluent active-run global, which is per-process and per-thread). With ``spool_dir``
    (the stage's work dir), a tracking-server outage spools its records there
    (``components.tracking_spool``) instead of failing the stage."""

    def __init__(self, run_id: str, spool_dir: Path | None = None, hold_until_commit: bool = False):
        self.run_id = run_id
        self._sender = tracking_spool.Sender(run_id, spool_dir, tracking_uri())
        # a checkpointed stage's rows wait for the checkpoint that covers them (``commit``): a
        # killed attempt then leaves no row that its resumed run would log a second time. They
        # are also on disk, for a kill between the checkpoint and its commit (``recover_held``).
        self._held: list[dict] | None = [] if hold_until_commit else None
        self._held_file = tracking_spool.Spool(spool_dir / f"{run_id}.held") if spool_dir and hold_until_commit \
            else None

    def log_metrics(self, metrics: dict[str, float], step: int | None = None, model_id: str | None = None) -> None:
        """``model_id``: the rows also count as that logged model's metrics (its page, the Models tab)."""
        ts = int(time.time() * 1000)
        extra = [model_id] if model_id else []
        rec = tracking_spool.record("metrics", [[k[:_MAX_KEY], float(v), ts, step or 0, *extra]
                                                for k, v in metrics.items()])
        if self._held is not None and step is not None:
            self._held.append(rec)
            if self._held_file is not None:
                self._held_file.append([rec])
        else:
            self._sender.send([rec])

    def commit(self) -> None:
        """A checkpoint now holds every step logged so far: send their rows."""
        if self._held:
            held, self._held[:] = list(self._held), []
            self._sender.send(held)
        if self._held_file is not None:
            self._held_file.keep([])

    def recover_held(self, upto_step: int) -> int:
        """An earlier attempt's held rows that its last checkpoint covers (step <= ``upto_step``),
        sent now; the rest is redone by this attempt. The number of rows sent."""
        if self._held_file is None:
            return 0
        recs = [dict(r, items=[x for x in r["items"] if x[3] <= upto_step]) for r in self._held_file.records()]
        recs = [r for r in recs if r["items"]]
        self._sender.send(recs)
        self._held_file.keep([])
        return len(recs)

    def log_params(self, params: dict[str, Any]) -> None:
        self._sender.send([tracking_spool.record("params", [[k, v] for k, v in _flatten(params).items()])])

    def set_tags(self, tags: dict[str, str]) -> None:
        self._sender.send([tracking_spool.record("tags", [[k[:_MAX_KEY], str(v)[:_MAX_TAG]]
                                                          for k, v in tags.items()])])

    def close(self, status: str, tags: dict[str, str] | None = None, outputs: dict | None = None,
              wait: float | None = None) -> None:
        """The run's last records (the stage's outputs to log, final tags) and its end; what is
        spooled is sent first, waiting for the server (TrackingUnavailable when it never answers)."""
        # a failed attempt's uncommitted rows stay held on disk: its resumed attempt sends what its checkpoint covers
        recs = []
        if status == "FINISHED" and self._held is not None:
            recs, self._held = list(self._held), []
            if self._held_file is not None:
                self._held_file.keep([])
        recs += [tracking_spool.record("outputs", **outputs)] if outputs else []
        if tags:
            recs.append(tracking_spool.record("tags", [[k[:_MAX_KEY], str(v)[:_MAX_TAG]] for k, v in tags.items()]))
        recs.append(tracking_spool.record("end", status=status, ts=int(time.time() * 1000)))
        self._sender.close(recs, wait)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        log = client().log_artifacts if Path(path).is_dir() else client().log_artifact
        log(self.run_id, str(path), artifact_path)


# ---------------------------------------------------------------- attempts of one stage call

CHECKPOINTS = "checkpoints/step-*/trainer_state.json"   # in the work dir: what a resumed attempt starts from


def latest_checkpoint(wd: Path) -> str | None:
    """The latest complete checkpoint a resumed attempt starts from (``step-NNNNNN``), if any."""
    done = sorted(p.parent.name for p in wd.glob(CHECKPOINTS))
    return done[-1] if done else None


def resume_attempt(exp_id: str, key: str, wd: Path, tags: dict[str, str]) -> str | None:
    """The run of an earlier attempt at ``key`` in this experiment that left a checkpoint: the
    new attempt resumes from it, so it continues that run (one run per training cell, its
    curves continuous); the attempts are in its ``rlvr.attempt*`` tags. None: start a new run."""
    ckpt = latest_checkpoint(wd)
    if ckpt is None:
        return None
    c = client()
    prior = c.search_runs([exp_id], f"tags.`rlvr.cache_key` = '{key}' and attributes.status != 'FINISHED'",
                          order_by=["attributes.start_time DESC"], max_results=1)
    if not prior:
        return None
    run = prior[0]
    n = int(run.data.tags.get("rlvr.attempt", "1"))
    how = run.data.tags.get("rlvr.error") or "died without closing its run (killed)"
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    c.update_run(run.info.run_id, status="RUNNING")
    MlflowTracker(run.info.run_id).set_tags({**tags, "rlvr.attempt": str(n + 1),
                                             f"rlvr.attempt.{n}": one_line(f"{run.info.status}: {how}", 400),
                                             f"rlvr.attempt.{n + 1}": f"started {stamp}, resumed from {ckpt}"})
    if "rlvr.error" in run.data.tags:  # the error of an attempt, now in its rlvr.attempt.<n> tag
        c.delete_tag(run.info.run_id, "rlvr.error")
    return run.info.run_id


# ---------------------------------------------------------------- sweep parent runs

def start_sweep_run(sweep_name: str, config: dict) -> str:
    """The parent run of one sweep execution; stage runs hang under it."""
    import tempfile

    import yaml
    c = client()
    exp_id = ensure_experiment(sweep_name)
    from components import run_card
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    run = c.create_run(exp_id, run_name=f"sweep {sweep_name} {stamp}",
                       tags={"rlvr.sweep": sweep_name, "rlvr.kind": "sweep", **run_card.source_tags("rlvr sweep"),
                             "mlflow.note.content": f"Sweep `{sweep_name}`: its stage runs are nested under this "
                                                    "run; `sweep.yaml` is the sweep file as run."})
    tracker = MlflowTracker(run.info.run_id)
    tracker.log_params({"sweep": {k: config[k] for k in ("executor", "seeds", "models", "methods", "retries")
                                  if k in config}})
    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / "sweep.yaml"
        f.write_text(yaml.safe_dump(config, sort_keys=False))
        tracker.log_artifact(f)
    return run.info.run_id


def end_sweep_run(run_id: str, status: str = "FINISHED", tables: dict | None = None) -> None:
    """Close the sweep's parent run. With the ``tables`` stage's result, the run also answers
    the sweep's question: its description is the results table headed by the winning
    method, and each method's headline numbers are parent-run metrics. Every close records
    the whole run's wall time, first start to now (``rlvr.wall_time``, ``sweep/wall_time_s``)."""
    c = client()
    if tables and status == "FINISHED":
        summarise_sweep(run_id, Path(tables["uri"]), tables.get("run_id", ""))
        if tables.get("run_id"):   # the tables this run used: computed now, or a cache hit of another sweep's
            c.set_tag(run_id, TABLES_RUN_TAG, tables["run_id"])
    run, end = c.get_run(run_id), int(time.time() * 1000)
    closes = json.loads(run.data.tags.get("rlvr.closes", "[]")) + [[status, end]]
    wall = (end - run.info.start_time) / 1000
    c.log_metric(run_id, "sweep/wall_time_s", wall, timestamp=end, step=len(closes))
    c.set_tag(run_id, "rlvr.closes", json.dumps(closes))
    c.set_tag(run_id, "rlvr.wall_time", wall_time_text(run.info.start_time, closes))
    c.set_terminated(run_id, status, end_time=end)


def summarise_sweep(run_id: str, out: Path, tables_run: str) -> dict[str, float]:
    """``<method>/<eval set>_mean_at_k`` (and ``<method>/tokens_per_update`` where the tokens
    table has both) for each trained method of the sweep, and the results table as the
    run's Markdown description; returns the metrics."""
    import pandas as pd
    c = client()
    text = (out / "tables.md").read_text()
    if not (out / "tables.csv").is_file():   # a tables stage without the accuracy table: its text only
        MlflowTracker(run_id).set_tags({"mlflow.note.content": text[:_MAX_TAG]})
        return {}
    df = pd.read_csv(out / "tables.csv")
    trained = json.loads(c.get_run(run_id).data.params.get("sweep.methods", "[]"))
    df = df[df["method"].isin(trained)] if trained else df
    where = df["eval_set"] if "eval_set" in df else pd.Series(["heldout"] * len(df), index=df.index)
    metrics = {}
    for (_, row), ev in zip(df.iterrows(), where):
        metrics[f"{row['method']}/{ev}_mean_at_k"] = float(row["mean@k"])
        if pd.notna(row.get("updates")) and row.get("updates") and pd.notna(row.get("generated_tokens")):
            metrics[f"{row['method']}/tokens_per_update"] = float(row["generated_tokens"]) / float(row["updates"])
    head = df[where == ("heldout" if (where == "heldout").any() else where.iloc[0])] if len(df) else df
    lines = []
    if len(head):
        best = head.sort_values("mean@k", ascending=False).iloc[0]
        lines.append(f"**Winner: {best['method']}** (mean@k {best['mean@k']:.3f} on "
                     f"{'heldout' if 'eval_set' not in df else best['eval_set']}, best of "
                     f"{', '.join(head['method'])}).\n")
    text = "\n".join(lines) + "\n" + text
    from components.run_card import run_link
    link = run_link(c.get_run(tables_run).info.experiment_id, tables_run) if tables_run else ""
    note = f"\n\n[All tables and plots: the tables run]({link})\n" if tables_run else ""
    if len(text) + len(note) > _MAX_TAG:
        text = text[:_MAX_TAG - len(note) - 30] + "\n\n... (cut: see tables.md)"
    MlflowTracker(run_id).log_metrics(metrics)
    MlflowTracker(run_id).set_tags({"mlflow.note.content": text + note, **({"rlvr.winner": str(best["method"])}
                                                                         if len(head) else {})})
    return metrics


def search_all(filter_string: str, max_results: int = 1) -> list:
    """The runs matching ``filter_string`` in every experiment, newest first."""
    c = client()
    exp_ids = [e.experiment_id for e in c.search_experiments()]
    return c.search_runs(exp_ids, filter_string, order_by=["attributes.start_time DESC"],
                         max_results=max_results) if exp_ids else []


def sweep_runs_url(base: str, sweep: str | None) -> str:
    """The runs page of ``sweep``'s experiment (default: the experiment of the latest sweep run)."""
    c = client()
    if sweep is not None:
        exp = c.get_experiment_by_name(sweep)
        if exp is None:
            raise LookupError(f"no MLflow experiment '{sweep}' in {tracking_uri()}")
        return runs_url(base, exp.experiment_id)
    latest = search_all("tags.`rlvr.kind` = 'sweep'")
    if not latest:
        raise LookupError(f"no sweep run in {tracking_uri()} yet (rlvr sweep FILE)")
    return runs_url(base, latest[0].info.experiment_id)


def latest_tables_run(sweep: str):
    """The tables of ``sweep``'s latest result (LookupError when there is none): the newer of its
    latest FINISHED ``tables`` stage run and the tables run its latest FINISHED sweep run used.
    The second is another sweep's run when the stage was a cache hit (a cache key holds no sweep
    name): a renamed sweep file, or a sweep whose tables inputs another sweep computed first."""
    own = search_all(f"tags.`rlvr.stage` = 'tables' and tags.`rlvr.sweep` = '{sweep}' "
                     "and attributes.status = 'FINISHED'")
    used = search_all(f"tags.`rlvr.kind` = 'sweep' and tags.`rlvr.sweep` = '{sweep}' "
                      f"and tags.`{TABLES_RUN_TAG}` != '' and attributes.status = 'FINISHED'")
    if used and (not own or used[0].info.start_time > own[0].info.start_time):
        run = client().get_run(used[0].data.tags[TABLES_RUN_TAG])
        if run.info.status == "FINISHED":
            return run
    if not own:
        raise LookupError(f"no finished 'tables' run for sweep '{sweep}' in {tracking_uri()}")
    return own[0]


def runs_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table in the MLflow UI at ``base``; ``workflowType`` switches the
    UI (which remembers the last choice, GenAI by default) to its machine-learning view."""
    from components.run_card import ML_VIEW
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{ML_VIEW}"


# ---------------------------------------------------------------- what a stage run carries

@contextlib.contextmanager
def system_metrics(run_id: str, enabled: bool):
    """CPU / memory / disk / network (and GPU where pynvml finds one) as ``system/*`` metrics
    of the run while the block runs. The interval is MLflow's own
    ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` (default here 5 s)."""
    if not enabled:
        yield
        return
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor  # needs psutil
    mon = SystemMetricsMonitor(run_id, sampling_interval=5, tracking_uri=tracking_uri())
    mon.start()
    try:
        yield
    finally:
        mon.finish()


def log_tables(run_id: str, out: Path, max_bytes: int) -> list[str]:
    """Every CSV of the output as an MLflow table (``tables/<name>.json``), which the UI shows
    as a table rather than a file to download."""
    import pandas as pd
    done = []
    for f in sorted(out.rglob("*.csv")):
        if f.stat().st_size < max_bytes:
            name = f"tables/{f.relative_to(out).with_suffix('.json').as_posix()}"
            client().log_table(run_id, pd.read_csv(f), name)
            done.append(name)
    return done


def copy_evaluation(policy_run_id: str, eval_run_id: str, ident: dict[str, str], summary: dict) -> None:
    """An evaluation's numbers also on the run that produced the evaluated policy, under the
    evaluation target (``heldout/mean_at_k``, ``math500/pass_at_1``), and as metrics of its
    logged model: the training runs' table (and the Models tab) then compares methods without
    joining runs. The latest evaluation of a target wins."""
    target = ident.get("benchmark") or "heldout"
    metrics = {f"{target}/mean_at_k": summary["mean_at_k"], f"{target}/maj_at_k": summary["maj_at_k"],
               **{f"{target}/pass_at_{k}": v for k, v in (summary.get("pass_at_k") or {}).items()}}
    t = MlflowTracker(policy_run_id)
    t.log_metrics(metrics, model_id=client().get_run(policy_run_id).data.tags.get("rlvr.logged_model"))
    t.set_tags({f"rlvr.eval.{target}": eval_run_id})


# the trained policy as a logged model and its registry version (lineage calls them through here)
from components.tracking_models import (WEIGHTS_DIR, WEIGHTS_MAX_MB_ENV, log_weights,  # noqa: E402,F401
                                        register_policy, registered_model_name)
