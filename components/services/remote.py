"""A sweep on the local Airflow deployment, over its REST API (``/api/v2``, JWT from
``/auth/token``): ``rlvr sweep FILE --on-services``.

The sweep file goes into ``$RLVR_HOME/services/sweeps`` (the dag-processor reads that
directory through RLVR_EXTRA_SWEEPS), a re-parse is requested, and the command waits until
the parsed DAG carries this file's sweep digest. Then it unpauses the DAG (the command that
triggers a DAG unpauses it), triggers a run whose conf holds the validated sweep (the run's
snapshot) and the trigger params, and follows it, printing each task state change.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import httpx

from components.artifacts import write_atomic
from components.services.postgres import ServiceError

FINAL_RUN = {"success", "failed"}


class Airflow:
    """A tiny client of Airflow's public REST API: one token (all-admins simple auth manager),
    renewed on 401; every error is one line with the method, path and Airflow's detail."""

    def __init__(self, base: str, timeout: float = 60.0):
        self.base = base.rstrip("/")
        self.http = httpx.Client(base_url=self.base, timeout=timeout)
        self._login()

    def _login(self) -> None:
        for i in range(5):
            try:
                r = self.http.get("/auth/token")
                break
            except httpx.TimeoutException:
                if i == 4:
                    raise ServiceError(f"Airflow at {self.base} did not answer /auth/token in 5 tries") from None
                time.sleep(2.0 * (i + 1))
            except httpx.HTTPError as e:
                raise ServiceError(f"Airflow not reachable at {self.base} ({type(e).__name__}): "
                                   "start it with `rlvr services up`") from None
        if r.status_code >= 400:
            raise ServiceError(f"GET {self.base}/auth/token: HTTP {r.status_code}: {r.text[:200]}")
        self.http.headers["Authorization"] = f"Bearer {r.json()['access_token']}"

    def _request(self, method: str, path: str, **kw) -> httpx.Response:
        # A loaded workstation can make the api-server answer slowly: idempotent calls are
        # retried on a timeout / refused connection; a POST (a trigger) is not repeated.
        tries = 1 if method == "POST" else 5
        for i in range(tries):
            try:
                return self.http.request(method, "/api/v2" + path, **kw)
            except (httpx.TimeoutException, httpx.ConnectError) as e:
                if i == tries - 1:
                    raise ServiceError(f"{method} {self.base}/api/v2{path}: {type(e).__name__} after {tries} "
                                       f"tries (is the api-server up? rlvr services status)") from None
                time.sleep(2.0 * (i + 1))
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, ok404: bool = False, **kw) -> Any:
        r = self._request(method, path, **kw)
        if r.status_code == 401:
            self._login()
            r = self._request(method, path, **kw)
        if ok404 and r.status_code == 404:
            return None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise ServiceError(" ".join(f"{method} /api/v2{path}: HTTP {r.status_code}: {detail}".split())[:600])
        return r.json() if r.content else None

    # ---- what rlvr needs
    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        out, offset = [], 0
        while True:
            page = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
                             params={"limit": 100, "offset": offset})
            out += page["task_instances"]
            offset += len(page["task_instances"])
            if not page["task_instances"] or offset >= page["total_entries"]:
                return out

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")

    def set_note(self, dag_id: str, run_id: str, note: str) -> None:
        """The run's note (its header in the UI shows it; Airflow keeps at most 1000 characters)."""
        self.call("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}", params={"update_mask": "note"},
                  json={"note": note[:1000]})

    def clear(self, dag_id: str, run_id: str, task: str, map_index: int | None = None) -> list[dict]:
        """What "Clear" on a task instance in the UI does: it and its downstream."""
        ids = [[task, map_index]] if map_index is not None and map_index >= 0 else [task]
        body = {"dag_run_id": run_id, "task_ids": ids, "include_downstream": True, "include_upstream": False,
                "only_failed": False, "dry_run": False, "reset_dag_runs": True}
        return self.call("POST", f"/dags/{dag_id}/clearTaskInstances", json=body)["task_instances"]

    def task_log(self, dag_id: str, run_id: str, task: str, try_number: int, map_index: int = -1) -> str:
        r = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task}/logs/{try_number}",
                      params={"map_index": map_index, "full_content": True}, headers={"Accept": "application/json"})
        if isinstance(r, dict):  # structured log: {"content": [{"event": ...}, ...]}
            content = r.get("content")
            if isinstance(content, list):
                return "\n".join(str(x.get("event", x)) if isinstance(x, dict) else str(x) for x in content)
            return str(content)
        return str(r)


def ti_name(ti: dict) -> str:
    if ti.get("map_index", -1) is None or ti.get("map_index", -1) < 0:
        return ti["task_id"]
    return f"{ti['task_id']}[{ti.get('rendered_map_index') or ti['map_index']}]"


def submit(af: Airflow, sweeps_dir: Path, file: Path, name: str, digest: str, timeout: float,
           log: Callable[[str], None]) -> str:
    """Put the sweep where the dag-processor reads it and wait for its DAG at this digest."""
    dag_id = f"rlvr_{name}"
    in_dags = file.parent == (Path(__file__).resolve().parents[2] / "dags" / "sweeps")
    target = sweeps_dir / f"{name}.yaml"
    if in_dags:  # an earlier submitted file of the same name would replace it: drop that copy
        target.unlink(missing_ok=True)
    else:
        sweeps_dir.mkdir(parents=True, exist_ok=True)
        text = file.read_text(encoding="utf-8")
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            write_atomic(target, text)
    t_end = time.monotonic() + timeout
    asked = False
    while True:
        d = af.call("GET", f"/dags/{dag_id}/details", ok404=True)
        if d is not None and digest in (d.get("doc_md") or ""):
            return dag_id
        if not asked:  # ask for a re-parse of the DAG file (any of its DAGs gives the token)
            anyd = d or next(iter(af.call("GET", "/dags", params={"tags": "rlvr", "limit": 1})["dags"]), None)
            if anyd is not None:
                tok = (d or af.call("GET", f"/dags/{anyd['dag_id']}/details")).get("file_token")
                if tok:
                    af.call("PUT", f"/parseDagFile/{tok}")
                    asked = True
                    log(f"[rlvr] waiting for the dag-processor to parse {dag_id} (sweep digest {digest})")
        errs = af.call("GET", "/importErrors", params={"limit": 100})["import_errors"]
        for e in errs:
            if e.get("filename", "").endswith("rlvr_sweep.py"):
                raise ServiceError(f"the DAG file does not import: {e.get('stack_trace', '').strip().splitlines()[-1]}")
        if time.monotonic() > t_end:
            where = "" if in_dags else f" from {target}"
            raise ServiceError(f"{dag_id}{where} not parsed at sweep digest {digest} within {timeout:.0f}s "
                               "(dag-processor log: $RLVR_HOME/services/logs/dag-processor.log)")
        time.sleep(1.0)


def trigger(af: Airflow, dag_id: str, conf: dict) -> str:
    af.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
    run = af.call("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
    return run["dag_run_id"]


def run_in_flight(af: Airflow, dag_id: str, conf: dict) -> str | None:
    """A queued or running run of ``dag_id`` triggered with exactly ``conf`` (the same sweep
    snapshot and params), oldest first: re-running the command after the terminal that
    followed it was lost follows that run instead of queueing a second copy of its work."""
    page = af.call("GET", f"/dags/{dag_id}/dagRuns", ok404=True,
                   params={"state": ["queued", "running"], "order_by": "id", "limit": 100})
    for run in (page or {}).get("dag_runs", []):
        if run.get("conf") == conf:
            return run["dag_run_id"]
    return None


def follow(af: Airflow, dag_id: str, run_id: str, log: Callable[[str], None], poll: float = 2.0,
           timeout: float | None = None) -> tuple[str, list[dict]]:
    """Poll the run until it ends; print each task instance's state change once."""
    seen: dict[tuple, tuple] = {}
    t_end = None if timeout is None else time.monotonic() + timeout
    t0 = time.monotonic()
    while True:
        state = af.dag_run(dag_id, run_id)["state"]
        tis = af.task_instances(dag_id, run_id)
        for ti in sorted(tis, key=lambda t: (t.get("start_date") or "~", t["map_index"])):
            key = (ti["task_id"], ti["map_index"])
            now = (ti.get("state"), ti.get("try_number"))
            if seen.get(key) != now and ti.get("state"):
                seen[key] = now
                log(f"[airflow {time.monotonic() - t0:6.0f}s] {ti_name(ti)}: {ti['state']} (try {ti.get('try_number')})")
        if state in FINAL_RUN:
            return state, tis
        if t_end is not None and time.monotonic() > t_end:
            raise ServiceError(f"{dag_id} run {run_id} still {state} after {timeout:.0f}s")
        time.sleep(poll)


def latest_run(af: Airflow, dag_id: str) -> str:
    runs = af.call("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "-id", "limit": 1}, ok404=True)
    if not runs or not runs["dag_runs"]:
        raise ServiceError(f"{dag_id} has no run on {af.base} (rlvr sweep FILE --on-services)")
    return runs["dag_runs"][0]["dag_run_id"]


def clear_stage(af: Airflow, dag_id: str, run_id: str, stage: str, cell: str | None,
                labels: Callable[[], list[str]] | None = None) -> list[dict]:
    """Clear ``stage`` (one mapped cell, by its label or map index, or every cell) and its
    downstream in a finished run; the cleared task instances. ``labels()``: the cell label of
    each map index, for a task instance killed before Airflow rendered its label."""
    run = af.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}", ok404=True)
    if run is None:
        raise ServiceError(f"{dag_id} has no run {run_id!r}")
    if run["state"] not in FINAL_RUN:
        raise ServiceError(f"{dag_id} run {run_id} is still {run['state']}: clearing its tasks would end the "
                           "running ones; wait until it ends")
    tis = [t for t in af.task_instances(dag_id, run_id) if t["task_id"] == stage]
    if not tis:
        raise ServiceError(f"{dag_id} run {run_id} has no task {stage!r}")
    map_index = None
    if cell is not None:
        hit = [t for t in tis if cell in (t.get("rendered_map_index"), str(t["map_index"]))]
        # a task killed before its label was rendered shows its map index (or nothing) instead
        bare = [t for t in tis if t.get("rendered_map_index") in (None, "", str(t["map_index"]))]
        if not hit and labels is not None and bare:
            known = labels()
            hit = [t for t in bare if 0 <= t["map_index"] < len(known) and known[t["map_index"]] == cell]
        if not hit:
            have = ", ".join(str(t.get("rendered_map_index") or t["map_index"]) for t in tis)
            raise ServiceError(f"{dag_id} run {run_id}: {stage} has no cell {cell!r} (cells: {have})")
        map_index = hit[0]["map_index"]
    return af.clear(dag_id, run_id, stage, map_index)
