"""Are the early stages bit-reproducible on one machine? Runs prepare_data, pretrain and
filter_hard of a sweep (default: the demo) in two empty stores and compares every output
file's digest. Home B runs each stage on home A's upstream artifacts, so a difference is
pinned to the stage that produced it (not inherited from an upstream one). For a file that
differs it prints the spread: the largest weight difference for a model, the values that
differ for JSON / JSONL.

    .venv/bin/python bench/determinism.py [--sweep dags/sweeps/demo.yaml] [--root /tmp/rlvr-det]
                                          [--threads N] [--stages prepare_data,pretrain,filter_hard]

Two whole sweep runs instead (e.g. two ``rlvr sweep dags/sweeps/demo.yaml`` from empty stores):

    .venv/bin/python bench/determinism.py --stores STORE_A STORE_B [--sweep-name demo]

matches the stage calls of each store's last successful run of the sweep (its receipt,
``components/receipts.py``) by stage and params, and prints per call the wall time in each
store (its MLflow run) and whether the outputs are identical, with the spread of what differs.
A call whose upstream output differed has other inputs, hence another cache key; it is still
matched by stage and params and marked "upstream differs".
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def run_stage(home: Path, name: str, params: dict, inputs: dict, threads: int | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RLVR_"))}
    env["RLVR_HOME"] = str(home)
    if threads:
        params = {**params, "threads": threads} if name in ("pretrain", "filter_hard") else params
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "components.cli", "run-stage", name, "--params", json.dumps(params),
                        "--inputs", json.dumps(inputs), "--sweep", "determinism"],
                       cwd=REPO, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{home}: {name} failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["seconds"] = time.monotonic() - t0
    return res


def manifest(uri: str) -> dict:
    d = Path(uri.removeprefix("file://"))
    return json.loads((d / "manifest.json").read_text()), d


def jsonl_fields_that_differ(a: Path, b: Path) -> list[str]:
    la = [json.loads(x) for x in a.read_text().splitlines()]
    lb = [json.loads(x) for x in b.read_text().splitlines()]
    keys = {k for x, y in zip(la, lb) for k in set(x) | set(y) if x.get(k) != y.get(k)}
    return sorted(keys | ({"<row count>"} if len(la) != len(lb) else set()))


def spread(name: str, a: Path, b: Path) -> str:
    """What differs between two versions of one output file."""
    if name.endswith(".safetensors"):
        from safetensors.torch import load_file
        ta, tb = load_file(str(a)), load_file(str(b))
        worst = max(((k, float((ta[k].float() - tb[k].float()).abs().max())) for k in ta), key=lambda x: x[1])
        n = sum(int((ta[k] != tb[k]).sum()) for k in ta)
        return f"{n} weights differ; largest |diff| {worst[1]:.3g} in {worst[0]}"
    if name.endswith(".json"):
        ja, jb = json.loads(a.read_text()), json.loads(b.read_text())
        if isinstance(ja, dict) and isinstance(jb, dict):
            keys = [k for k in sorted(set(ja) | set(jb)) if ja.get(k) != jb.get(k)]
            return "; ".join(f"{k}: {ja.get(k)} vs {jb.get(k)}" for k in keys[:6])
        return "values differ"
    if name.endswith(".jsonl"):
        la = [json.loads(x) for x in a.read_text().splitlines()]
        lb = [json.loads(x) for x in b.read_text().splitlines()]
        keys = jsonl_fields_that_differ(a, b)
        sa, sb = {x.get("uid") for x in la}, {x.get("uid") for x in lb}
        return (f"{len(la)} vs {len(lb)} rows; {len(sa ^ sb)} uids in one only; "
                f"fields that differ: {', '.join(keys) or 'none'}")
    return "bytes differ"


def run_seconds(store: Path, run_id: str) -> float:
    """Wall time of a stage's MLflow run (the store's SQLite backend, read directly: no mlflow import)."""
    import sqlite3

    con = sqlite3.connect(f"file:{store / 'mlflow.db'}?mode=ro", uri=True)
    try:
        row = con.execute("select start_time, end_time from runs where run_uuid = ?", (run_id,)).fetchone()
    finally:
        con.close()
    return float("nan") if not row or row[1] is None else (row[1] - row[0]) / 1000.0


def sweep_seconds(store: Path, sweep: str) -> float:
    """Wall time of the store's latest finished MLflow run of the whole sweep ("sweep NAME <time>")."""
    import sqlite3

    con = sqlite3.connect(f"file:{store / 'mlflow.db'}?mode=ro", uri=True)
    try:
        row = con.execute("select start_time, end_time from runs where name like ? and status = 'FINISHED' "
                          "order by start_time desc limit 1", (f"sweep {sweep} %",)).fetchone()
    finally:
        con.close()
    return float("nan") if not row or row[1] is None else (row[1] - row[0]) / 1000.0


def compare_stores(a: Path, b: Path, sweep: str) -> None:
    from components.receipts import receipt_path

    def calls(store: Path) -> dict:
        rec = json.loads(receipt_path(store, sweep).read_text())
        out = {}
        for c in rec["calls"]:
            key = (c["stage"], json.dumps(c["params"], sort_keys=True))
            if key in out:
                sys.exit(f"{store}: two {c['stage']} calls with the same params: cannot match them")
            out[key] = c
        return out

    ca, cb = calls(a), calls(b)
    if set(ca) != set(cb):
        sys.exit(f"the two receipts hold different stage calls: {sorted(set(ca) ^ set(cb))}")
    print(f"sweep {sweep}: {len(ca)} stage calls; A = {a}, B = {b}")
    print("| stage | call | A s | B s | result |")
    print("|---|---|---|---|---|")
    same_all, only_clock, total = True, True, [0.0, 0.0]
    for key in ca:   # receipt A's order: the order the calls finished in A
        (ma, da), (mb, db) = manifest(ca[key]["uri"]), manifest(cb[key]["uri"])
        sa, sb = run_seconds(a, ma["run_id"]), run_seconds(b, mb["run_id"])
        total = [total[0] + sa, total[1] + sb]
        diff = sorted(f for f in set(ma["files"]) | set(mb["files"]) if ma["files"].get(f) != mb["files"].get(f))
        same_in = ma["cache_key"] == mb["cache_key"]
        verdict = "identical" if not diff else f"{len(diff)} of {len(ma['files'])} files differ"
        if diff and not same_in:
            verdict += " (upstream differs)"
        same_all &= not diff
        # wall-clock fields (time/step_s, ...) are measurements of the run, not results of it
        only_clock &= all(f.endswith(".jsonl") and all(k.startswith("time/") for k in
                                                       jsonl_fields_that_differ(da / f, db / f)) for f in diff)
        p = json.loads(key[1])
        label = " ".join(f"{k}={p[k]}" for k in ("method", "seed", "label") if k in p)
        print(f"| {key[0]} | {label} | {sa:.0f} | {sb:.0f} | {verdict} (digest {ma['digest'][:12]}"
              f"{'' if ma['digest'] == mb['digest'] else ' vs ' + mb['digest'][:12]}) |", flush=True)
        for f in diff:
            print(f"|  |  |  |  | {f}: {spread(f, da / f, db / f)} |", flush=True)
    print(f"\nsum of stage run times: A {total[0]:.0f} s, B {total[1]:.0f} s; whole sweep run (MLflow): "
          f"A {sweep_seconds(a, sweep):.0f} s, B {sweep_seconds(b, sweep):.0f} s")
    print("verdict: " + ("every stage call's outputs are bit-identical" if same_all else
                         "every computed output is bit-identical; only wall-clock fields (time/*) differ"
                         if only_clock else "not bit-identical"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", default=str(REPO / "dags" / "sweeps" / "demo.yaml"))
    ap.add_argument("--root", default="/tmp/rlvr-det")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: the stages' own, 2)")
    ap.add_argument("--stages", default="prepare_data,pretrain,filter_hard")
    ap.add_argument("--given", default="", help="upstream outputs to use instead of running them: "
                                                "prepare_data=URI,pretrain=URI")
    ap.add_argument("--compare", nargs=2, metavar="URI", help="only compare two finished artifacts")
    ap.add_argument("--stores", nargs=2, metavar="RLVR_HOME", help="compare two finished runs of a sweep")
    ap.add_argument("--sweep-name", default="demo", help="with --stores: the sweep (its receipt)")
    args = ap.parse_args()
    if args.stores:
        compare_stores(Path(args.stores[0]), Path(args.stores[1]), args.sweep_name)
        return
    if args.compare:
        (ma, da), (mb, db) = manifest(args.compare[0]), manifest(args.compare[1])
        diff = sorted(f for f in set(ma["files"]) | set(mb["files"]) if ma["files"].get(f) != mb["files"].get(f))
        verdict = "identical" if not diff else f"{len(diff)} of {len(ma['files'])} files differ"
        print(f"{ma['stage']}: {verdict}"
              f" (tree digest {ma['digest'][:12]} vs {mb['digest'][:12]}; params equal: {ma['params'] == mb['params']})")
        for f in diff:
            print(f"    {f}: {spread(f, da / f, db / f)}")
        return
    from components.sweep import load_sweep

    cfg = load_sweep(args.sweep)
    model = cfg.models[0]
    plan = {"prepare_data": (cfg.stages.prepare_data, {}),
            "pretrain": (cfg.pretrain_params(model), {"data": "prepare_data"}),
            "filter_hard": (cfg.stages.filter_hard, {"data": "prepare_data", "model": "pretrain"})}
    stages = args.stages.split(",")
    root = Path(args.root)
    shutil.rmtree(root, ignore_errors=True)
    homes = {"A": root / "A", "B": root / "B"}
    uris: dict[str, str] = dict(kv.split("=", 1) for kv in args.given.split(",") if kv)
    rows = []
    for st in stages:
        params, wiring = plan[st]
        inputs = {k: uris[v] for k, v in wiring.items()}     # home A's upstream outputs, for both
        ra = run_stage(homes["A"], st, params, inputs, args.threads)
        rb = run_stage(homes["B"], st, params, inputs, args.threads)
        uris[st] = ra["uri"]
        (ma, da), (mb, db) = manifest(ra["uri"]), manifest(rb["uri"])
        diff = sorted(f for f in set(ma["files"]) | set(mb["files"]) if ma["files"].get(f) != mb["files"].get(f))
        rows.append((st, ra["seconds"], rb["seconds"], ma["digest"] == mb["digest"], len(ma["files"]), diff))
        verdict = "identical" if not diff else f"{len(diff)} of {len(ma['files'])} files differ"
        print(f"{st:13s} A {ra['seconds']:6.1f}s  B {rb['seconds']:6.1f}s  {verdict}"
              f"  (tree digest {ma['digest'][:12]} vs {mb['digest'][:12]})", flush=True)
        for f in diff:
            print(f"    {f}: {spread(f, da / f, db / f)}", flush=True)
    import torch
    print(f"\ntorch {torch.__version__}, {torch.get_num_threads()} default threads here, "
          f"stage threads {args.threads or 'default (2)'}; MKL {torch.backends.mkl.is_available()}, "
          f"oneDNN {torch.backends.mkldnn.is_available()}; cores {os.cpu_count()}")
    print("verdict: " + ("every compared stage is bit-identical" if all(r[3] for r in rows)
                         else "not bit-identical: " + ", ".join(r[0] for r in rows if not r[3])))


if __name__ == "__main__":
    main()
