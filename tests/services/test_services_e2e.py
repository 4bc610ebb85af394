"""The scheduler path for real: `rlvr services up` (PostgreSQL, MLflow server, Airflow's four
processes), a tiny sweep with the REAL stages and the real grader triggered over the REST
API, a killed mapped train task rerun with `rlvr rerun`, and the MLflow server killed while a
train task runs, brought back by `rlvr services up` alone.

Run 1 (`rlvr sweep FILE --on-services`): every task succeeds, the mapped counts match the
grid, every stage has one FINISHED MLflow run on the server with `mlflow-artifacts:/` URIs,
and training rewards are non-zero (VSR replays 98 % of a verified expert trace, so a policy
that merely closes the answer earns reward 1: a grader that cannot grade inside an Airflow
task makes them all 0). Run 2 (trigger-form param seeds=[1], over REST): the vsr train task
is killed (SIGKILL to its task process) after a checkpoint; clearing it with its downstream
(`rlvr rerun svc train --cell tiny-vsr-s1`) reruns only those tasks, training resumes from the
checkpoint with the sweep as it was when the run started (the file is edited meanwhile), and the
sweep's MLflow run ends FINISHED. Run 3 (seeds=[2]): the MLflow server is SIGKILLed while a train
task runs; `services status` names it down, `services up` starts it alone (every other service
keeps its pid, the task its process), the task spools and replays its metrics, and the run
succeeds with one row per step. Run 4 (seeds=[3]): every service SIGKILLed while a train task has
a checkpoint (with the `rlvr sweep --on-services` following it), then `services up`: the run goes on,
the killed cells resume from their checkpoints, and the same command follows that run again.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import yaml
from tiny_sweep import tiny_sweep

from components.services import config as services_config, postgres, remote

pytestmark = [pytest.mark.services, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SWEEP = tiny_sweep("svc", pretrain={"steps": 10, "batch_size": 32},
                   prepare_data={"pretrain_size": 300, "pool_size": 16, "heldout_pool_size": 8, "probe_per_level": 4,
                                 "probe_levels": [3]},
                   filter_hard={"keep_all": True, "max_heldout": 4},
                   train={"steps": 4, "val_size": 2, "ckpt_every": 1},
                   evaluate={"samples_per_seed": 1, "seeds": [0], "pass_ks": [1]},
                   method_config={"grpo": {"n": 2}, "vsr": {"n": 2, "rho": 1.0, "cut_points": "fractions",
                                                          "cut_fractions": [0.98]}})
RUN3_STEPS = 16
STAGES = ("prepare_data", "pretrain", "filter_hard", "seed_prefixes", "train", "evaluate", "tokens", "tables")


@pytest.fixture(scope="module")
def deployment():
    # a directory the postgres system user can traverse (pytest's tmp root is 0700)
    root = Path(tempfile.mkdtemp(prefix="rlvr-services-test-", dir="/tmp"))
    root.chmod(0o755)
    home = root / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "RLVR_"))}
    env.update({"RLVR_HOME": str(home), "PYTHONPATH": str(REPO)})
    af, ml, pg = services_config.free_ports(3)
    cli = [sys.executable, "-m", "components.cli"]
    t0 = time.monotonic()
    r = subprocess.run(cli + ["services", "up", "--airflow-port", str(af), "--mlflow-port", str(ml),
                              "--pg-port", str(pg)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    print(f"\nservices up: {time.monotonic() - t0:.0f}s\n{r.stdout}")
    sd = home / "services"
    try:
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
        yield {"home": home, "env": env, "cli": cli, "cfg": services_config.load_config(sd), "sd": sd}
    finally:
        pids = json.loads((sd / "pids.json").read_text()) if (sd / "pids.json").exists() else {}
        pg_data = (services_config.load_config(sd) or {}).get("pg_data")
        d = subprocess.run(cli + ["services", "down", "--purge"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=180)
        print(d.stderr)
        left = [p.pid for rec in pids.values() for p in _session(rec["pid"])]
        shutil.rmtree(root, ignore_errors=True)
        assert d.returncode == 0 and not left, (d.stderr, left)   # down stops everything up started
        assert not sd.exists() and not (pg_data and Path(pg_data).exists())   # --purge leaves nothing


def _session(sid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def _mlflow(dep):
    from mlflow import MlflowClient
    c = MlflowClient(tracking_uri=services_config.mlflow_url(dep["cfg"]))
    exp = c.get_experiment_by_name("svc")
    return c, exp.experiment_id


def _param(run, name: str):
    p = run.data.params
    return p.get(f"train.{name}", p.get(name))


def test_status_reports_every_service_healthy(deployment):
    r = subprocess.run(deployment["cli"] + ["services", "status"], cwd=REPO, env=deployment["env"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.strip()}
    expected = {"mlflow", "api-server", "scheduler", "dag-processor", "triggerer"}
    if postgres.available():  # CI installs Debian's postgresql (.ci/run): both metadata DBs on it
        assert deployment["cfg"]["db"] == "postgres"
        expected.add("postgres")
    assert set(rows) == expected and all(line.rstrip().endswith(" ok") for line in rows.values()), r.stdout


def test_bookkeeping_tasks_have_workers_beside_the_stage_pool(deployment):
    """The stage pool takes --parallelism slots; the executor has BOOKKEEPING_SLOTS more workers,
    the default pool's size, so a sweep's start/plan/end tasks never queue in the executor
    behind stages (where task_queued_timeout would fail them)."""
    cfg = deployment["cfg"]
    af = remote.Airflow(services_config.airflow_url(cfg))
    stage, default = af.call("GET", f"/pools/{services_config.POOL}"), af.call("GET", "/pools/default_pool")
    extra = services_config.BOOKKEEPING_SLOTS
    assert stage["slots"] == services_config.stage_slots(cfg) >= services_config.stage_threads()
    assert default["slots"] == extra
    env_sh = (deployment["sd"] / "env.sh").read_text()
    assert f"export AIRFLOW__CORE__PARALLELISM='{stage['slots'] + extra}'" in env_sh, env_sh


def test_sweep_on_services_then_kill_and_clear_a_train_task(deployment, tmp_path):
    dep, cfg = deployment, deployment["cfg"]
    sweep = tmp_path / "svc.yaml"
    sweep.write_text(SWEEP)
    t0 = time.monotonic()
    r = subprocess.run(dep["cli"] + ["sweep", str(sweep), "--on-services"], cwd=REPO, env=dep["env"],
                       capture_output=True, text=True, timeout=900)
    print(f"run 1 through the services: {time.monotonic() - t0:.0f}s")
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-4000:])
    assert "vsr" in r.stdout and "grpo" in r.stdout                       # the tables, printed at the end

    af = remote.Airflow(services_config.airflow_url(cfg))
    runs = af.call("GET", "/dags/rlvr_svc/dagRuns", params={"limit": 10})["dag_runs"]
    assert len(runs) == 1 and runs[0]["state"] == "success"
    tis = af.task_instances("rlvr_svc", runs[0]["dag_run_id"])
    assert all(t["state"] == "success" for t in tis), [(remote.ti_name(t), t["state"]) for t in tis]
    assert sum(t["task_id"] == "train" for t in tis) == 2                 # grpo, vsr
    assert sum(t["task_id"] == "evaluate" for t in tis) == 3              # + the base policy
    assert {t["rendered_map_index"] for t in tis if t["task_id"] == "train"} == {"tiny-grpo-s0", "tiny-vsr-s0"}

    c, exp = _mlflow(dep)
    stage_runs = [x for x in c.search_runs([exp], max_results=500) if "rlvr.stage" in x.data.tags]
    counts = {s: sum(x.data.tags["rlvr.stage"] == s for x in stage_runs) for s in STAGES}
    assert counts == {"prepare_data": 1, "pretrain": 1, "filter_hard": 1, "seed_prefixes": 1, "train": 2,
                      "evaluate": 3, "tokens": 1, "tables": 1}
    assert all(x.info.status == "FINISHED" for x in stage_runs)
    assert all(x.info.artifact_uri.startswith("mlflow-artifacts:/") for x in stage_runs)
    sweeps = [x for x in c.search_runs([exp]) if x.data.tags.get("rlvr.kind") == "sweep"]
    assert [x.info.status for x in sweeps] == ["FINISHED"]
    # the sweep's run answers the question: the winner, the results table, each method's headline numbers
    top = sweeps[0].data
    assert top.tags["rlvr.winner"] in ("grpo", "vsr") and f"**Winner: {top.tags['rlvr.winner']}**" in \
        top.tags["mlflow.note.content"] and "mean@k [95% CI]" in top.tags["mlflow.note.content"], top.tags
    assert {"grpo/heldout_mean_at_k", "vsr/heldout_mean_at_k"} <= set(top.metrics), top.metrics
    best = max(("grpo", "vsr"), key=lambda m: top.metrics[f"{m}/heldout_mean_at_k"])
    assert top.metrics[f"{top.tags['rlvr.winner']}/heldout_mean_at_k"] == top.metrics[f"{best}/heldout_mean_at_k"]
    for x in (x for x in stage_runs if x.data.tags["rlvr.stage"] == "train"):   # the policy: a logged model
        [out] = x.outputs.model_outputs
        assert c.get_logged_model(out.model_id).name == f"svc-tiny-{_param(x, 'method')}"
        [v] = c.search_model_versions(f"name = 'svc.tiny.{_param(x, 'method')}' and run_id = '{x.info.run_id}'")
        assert v.source == f"models:/{out.model_id}"
        assert {a.path for a in c.list_logged_model_artifacts(out.model_id)} >= {"model.safetensors", "config.json"}
    vsr = next(x for x in stage_runs if x.data.tags["rlvr.stage"] == "train" and _param(x, "method") == "vsr")
    rewards = [m.value for m in c.get_metric_history(vsr.info.run_id, "reward/mean")]
    assert len(rewards) == 4 and max(rewards) > 0, rewards                 # the real grader scored inside tasks

    # ---- run 2: seeds [1] from the trigger form; kill the vsr train task after a checkpoint
    run2 = remote.trigger(af, "rlvr_svc", {"seeds": [1]})
    victim, ckpt = _wait_for_checkpoint(af, c, exp, run2, dep["home"], timeout=600)
    sched = json.loads((dep["sd"] / "pids.json").read_text())["scheduler"]["pid"]
    procs = [p for p in _session(sched) if p.cmdline()[-1:] == [victim["id"]] or victim["id"] in " ".join(p.cmdline())]
    task_proc = [p for p in procs if "LocalExecutor" not in " ".join(p.cmdline())]
    assert len(task_proc) == 1, [p.cmdline() for p in procs]
    task_proc[0].send_signal(signal.SIGKILL)
    # someone edits the sweep while the run is in flight: the cleared task must not see it
    _set_train_steps(dep["sd"] / "sweeps" / "svc.yaml", 6)
    state, _ = remote.follow(af, "rlvr_svc", run2, print, timeout=600)
    assert state == "failed"
    first = {(t["task_id"], t["map_index"]): t for t in af.task_instances("rlvr_svc", run2)}
    assert first[("train", victim["map_index"])]["state"] == "failed", first
    sweep2 = _sweep_run(c, exp, run2)
    assert sweep2.info.status == "FAILED"                                  # end_sweep closed it

    # the killed task's label was never rendered: `rlvr rerun` finds its map index in the run's snapshot
    r = subprocess.run(dep["cli"] + ["rerun", "svc", "train", "--cell", "tiny-vsr-s1", "--on-services"], cwd=REPO,
                       env=dep["env"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
    assert f"cleared in rlvr_svc run {run2}: " in r.stderr and "vsr" in r.stdout       # followed, then the tables
    second = {(t["task_id"], t["map_index"]): t for t in af.task_instances("rlvr_svc", run2)}
    assert all(t["state"] == "success" for t in second.values()), second
    line = next(x for x in r.stderr.splitlines() if f"cleared in rlvr_svc run {run2}: " in x)
    names = line.split(f"run {run2}: ", 1)[1].split(", ")
    assert {n.split("[")[0] for n in names} == {"train", "eval_plan", "evaluate", "tokens", "tables", "end_sweep"}, names
    assert [n for n in names if n.startswith("train")] == [f"train[{victim['map_index']}]"], names   # that cell only
    rerun_tasks = {"eval_plan", "evaluate", "tokens", "tables", "end_sweep"}
    for key in set(first) & set(second):                                   # only it and its downstream reran
        if key[0] not in rerun_tasks and key != ("train", victim["map_index"]):
            assert first[key]["try_number"] == second[key]["try_number"] == 1, (key, first[key], second[key])
    assert second[("train", victim["map_index"])]["try_number"] == 2
    log = af.task_log("rlvr_svc", run2, "train", 2, victim["map_index"])
    resumed = re.search(r"resumed from step-(\d+)", log)
    assert resumed and int(resumed.group(1)) >= int(ckpt.split("-")[1]), log[-3000:]   # not from step 0
    sweep2 = _sweep_run(c, exp, run2)
    assert sweep2.info.status == "FINISHED"
    # the whole run's time, first start to last end, on the sweep run, in the output and as the run's note
    closes = json.loads(sweep2.data.tags["rlvr.closes"])
    assert [st for st, _ in closes] == ["FAILED", "FINISHED"], closes
    header = af.dag_run("rlvr_svc", run2)
    assert f"whole run: {sweep2.data.tags['rlvr.wall_time']}" in r.stderr
    assert header["note"] == f"Whole run (first start to last end, all reruns): {sweep2.data.tags['rlvr.wall_time']}"
    rerun_s = (_ts(header["end_date"]) - _ts(header["start_date"])).total_seconds()
    assert sweep2.data.metrics["sweep/wall_time_s"] > rerun_s + 5, (sweep2.data.metrics, header)   # not the rerun only
    raw = af.call("GET", f"/dags/rlvr_svc/dagRuns/{run2}/taskInstances/train/logs/2",
                  params={"map_index": victim["map_index"], "full_content": True}, headers={"Accept": "application/json"})
    errors = [x for x in raw["content"] if isinstance(x, dict) and x.get("level") in ("error", "critical")]
    assert not errors, errors[:5]                                          # MLflow's INFO lines are INFO here
    vsr1 = [x for x in c.search_runs([exp], "tags.`rlvr.stage` = 'train'") if _param(x, "method") == "vsr"
            and _param(x, "seed") == "1"]
    assert [x.info.status for x in vsr1] == ["FINISHED"]                   # the resumed attempt continued its run
    assert vsr1[0].data.tags["rlvr.attempt"] == "2" and "resumed from step-" in vsr1[0].data.tags["rlvr.attempt.2"]
    steps = [m.step for m in c.get_metric_history(vsr1[0].info.run_id, "reward/mean")]
    assert sorted(steps) == sorted(set(steps)) and len(steps) == 4, steps   # one value per step
    assert _param(vsr1[0], "steps") == "4"                                 # the run's snapshot, not the edit


def test_mlflow_killed_mid_train_services_up_starts_it_alone(deployment):
    dep, cfg = deployment, deployment["cfg"]
    af = remote.Airflow(services_config.airflow_url(cfg))
    c, exp = _mlflow(dep)
    # enough steps that a train task outlives the outage and the restart (a few seconds a step here)
    _set_train_steps(dep["sd"] / "sweeps" / "svc.yaml", RUN3_STEPS)
    run3 = remote.trigger(af, "rlvr_svc", {"seeds": [2]})
    pids = json.loads((dep["sd"] / "pids.json").read_text())
    t_end, workers = time.monotonic() + 600, []
    while not workers and time.monotonic() < t_end:   # a running train task that has logged a step, and its process
        logged = [x for x in c.search_runs([exp], "tags.`rlvr.stage` = 'train' and attributes.status = 'RUNNING'")
                  if _param(x, "seed") == "2" and c.get_metric_history(x.info.run_id, "reward/mean")]
        ids = [t["id"] for t in af.task_instances("rlvr_svc", run3) if t["task_id"] == "train"
               and t["state"] == "running"] if logged else []
        workers = [p for p in _session(pids["scheduler"]["pid"]) if "LocalExecutor" not in " ".join(p.cmdline())
                   and any(i in " ".join(p.cmdline()) for i in ids)]
        time.sleep(0.5)
    assert workers, "no train task of run 3 was found running with a logged step in time"
    t_found = time.monotonic()
    for p in _session(pids["mlflow"]["pid"]):
        p.kill()                                                         # a crash, not a shutdown
    r = subprocess.run(dep["cli"] + ["services", "status"], cwd=REPO, env=dep["env"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and "down: mlflow " in r.stdout, r.stdout
    r = subprocess.run(dep["cli"] + ["services", "up"], cwd=REPO, env=dep["env"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "starting: mlflow" in r.stderr, r.stderr[-3000:]
    after = json.loads((dep["sd"] / "pids.json").read_text())
    assert {n: after[n]["pid"] for n in after if n != "mlflow"} == {n: pids[n]["pid"] for n in pids if n != "mlflow"}
    assert after["mlflow"]["pid"] != pids["mlflow"]["pid"]
    print(f"mlflow killed and started again {time.monotonic() - t_found:.0f}s after a step was logged")
    assert all(p.is_running() for p in workers), workers                 # the running task was not touched
    state, _ = remote.follow(af, "rlvr_svc", run3, print, timeout=900)
    print(f"run 3 ended {time.monotonic() - t_found:.0f}s after a step was logged")
    assert state == "success"
    trains = [x for x in c.search_runs([exp], "tags.`rlvr.stage` = 'train'") if _param(x, "seed") == "2"]
    assert sorted(x.info.status for x in trains) == ["FINISHED", "FINISHED"]   # grpo, vsr: no attempt failed
    for x in trains:
        steps = [m.step for m in c.get_metric_history(x.info.run_id, "reward/mean")]
        # every row once, as many as the file said when run 3 started
        assert len(steps) == len(set(steps)) == int(_param(x, "steps")) == RUN3_STEPS, (x.info.run_name, steps)


def test_every_service_killed_mid_train_services_up_resumes_the_run(deployment, tmp_path):
    """The machine's loss, as far as one deployment sees it: every process of every service
    SIGKILLed (PostgreSQL and the scheduler's task processes too) while a train task has a
    checkpoint, and the `rlvr sweep --on-services` that followed the run with them; then
    `rlvr services up` at once: the run goes on by itself, the killed cells run again and resume
    from their checkpoints, each still one MLflow run with one row per step, and the same
    `rlvr sweep` command follows that run to its end instead of triggering a second one."""
    dep, cfg = deployment, deployment["cfg"]
    af = remote.Airflow(services_config.airflow_url(cfg))
    c, exp = _mlflow(dep)
    sweep = tmp_path / "svc.yaml"
    raw = yaml.safe_load((dep["sd"] / "sweeps" / "svc.yaml").read_text())
    sweep.write_text(yaml.safe_dump({**raw, "seeds": [3]}, sort_keys=False))
    before = {r["dag_run_id"] for r in af.call("GET", "/dags/rlvr_svc/dagRuns", params={"limit": 100})["dag_runs"]}
    cmd = dep["cli"] + ["sweep", str(sweep), "--on-services"]
    follower = subprocess.Popen(cmd, cwd=REPO, env=dep["env"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_end, new = time.monotonic() + 300, set()
    while not new and time.monotonic() < t_end and follower.poll() is None:
        new = {r["dag_run_id"] for r in af.call("GET", "/dags/rlvr_svc/dagRuns", params={"limit": 100})["dag_runs"]}
        new -= before
        time.sleep(0.5)
    assert len(new) == 1, (new, follower.poll())
    [run4] = new
    victim, ckpt = _wait_for_checkpoint(af, c, exp, run4, dep["home"], timeout=600, seed="3")
    pids = json.loads((dep["sd"] / "pids.json").read_text())
    killed = [p for rec in pids.values() for p in _session(rec["pid"])]
    follower.kill()
    follower.wait()
    for p in killed:
        p.kill()
    r = subprocess.run(dep["cli"] + ["services", "up"], cwd=REPO, env=dep["env"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, (r.stderr[-3000:], [(p.pid, _status(p)) for p in killed])
    assert "earlier scheduler job(s) no longer run" in r.stderr + r.stdout, r.stderr[-3000:]
    after = json.loads((dep["sd"] / "pids.json").read_text())
    assert set(after) == set(pids) and all(after[n]["pid"] != pids[n]["pid"] for n in pids), (pids, after)
    r = subprocess.run(cmd, cwd=REPO, env=dep["env"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
    assert f"following rlvr_svc run {run4}, in flight with this sweep already" in r.stderr, r.stderr[-3000:]
    runs = af.call("GET", "/dags/rlvr_svc/dagRuns", params={"limit": 100})["dag_runs"]
    assert {x["dag_run_id"] for x in runs} == before | {run4}, runs          # no second run triggered
    assert af.dag_run("rlvr_svc", run4)["state"] == "success"
    tis = {(t["task_id"], t["map_index"]): t for t in af.task_instances("rlvr_svc", run4)}
    assert tis[("train", victim["map_index"])]["try_number"] == 2, tis[("train", victim["map_index"])]
    log = af.task_log("rlvr_svc", run4, "train", 2, victim["map_index"])
    resumed = re.search(r"resumed from step-(\d+)", log)
    assert resumed and int(resumed.group(1)) >= int(ckpt.split("-")[1]), log[-3000:]   # not from step 0
    trains = [x for x in c.search_runs([exp], "tags.`rlvr.stage` = 'train' and attributes.status = 'FINISHED'")
              if _param(x, "seed") == "3"]
    assert sorted(_param(x, "method") for x in trains) == ["grpo", "vsr"], trains   # one finished run a cell
    vsr = next(x for x in trains if _param(x, "method") == "vsr")
    assert vsr.data.tags["rlvr.attempt"] == "2" and "resumed from step-" in vsr.data.tags["rlvr.attempt.2"]
    for x in trains:
        steps = [m.step for m in c.get_metric_history(x.info.run_id, "reward/mean")]
        assert len(steps) == len(set(steps)) == RUN3_STEPS, (x.info.run_name, steps)


def _status(p: psutil.Process) -> str:
    try:
        return p.status()
    except psutil.Error as e:
        return type(e).__name__


def _set_train_steps(sweep: Path, steps: int) -> None:
    """Edit the submitted sweep file as a user would, between runs."""
    cfg = yaml.safe_load(sweep.read_text())
    assert cfg["stages"]["train"]["steps"] != steps, cfg["stages"]["train"]
    cfg["stages"]["train"]["steps"] = steps
    sweep.write_text(yaml.safe_dump(cfg, sort_keys=False))


def _ts(iso: str):
    import datetime as dt
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _sweep_run(c, exp, dag_run_id: str):
    found = c.search_runs([exp], f"tags.`rlvr.airflow_run` = 'rlvr_svc/{dag_run_id}'")
    assert len(found) == 1, found
    return found[0]


def _wait_for_checkpoint(af, c, exp, run_id: str, home: Path, timeout: float, seed: str = "1"):
    """The running vsr train task instance and the name of a checkpoint it has written."""
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        tis = af.task_instances("rlvr_svc", run_id)
        # map index 1 = vsr (grid order: grpo, vsr); the readable label is rendered only when it ends
        ti = next((t for t in tis if t["task_id"] == "train" and t["map_index"] == 1), None)
        if ti is not None and ti["state"] == "running":
            for x in c.search_runs([exp], "tags.`rlvr.stage` = 'train' and attributes.status = 'RUNNING'"):
                if _param(x, "method") == "vsr" and _param(x, "seed") == seed:
                    ck = home / "work" / "train" / x.data.tags["rlvr.cache_key"] / "checkpoints"
                    done = sorted(p.name for p in ck.glob("step-*") if (p / "trainer_state.json").is_file()) \
                        if ck.is_dir() else []
                    if done:
                        return ti, done[-1]
        assert ti is None or ti["state"] in (None, "scheduled", "queued", "running"), ti
        time.sleep(0.5)
    raise AssertionError("the vsr train task wrote no checkpoint in time")
