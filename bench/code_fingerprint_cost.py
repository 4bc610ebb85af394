"""Cost of the code fingerprint in stage cache keys (components/code_fingerprint.py), per stage
and in total over all stages, in three situations:

- cold: a new process and an empty RLVR_HOME (every file parsed);
- fresh process: a new process (in-process caches emptied) whose RLVR_HOME has the disk cache;
- repeat: the same process again (one stat per file).

Wall and CPU time (wall exceeds CPU on a busy machine), and the cold and fresh-process totals
as ratios to the repeat (the baseline, same run). Also checks nothing heavy got imported.

    .venv/bin/python bench/code_fingerprint_cost.py
"""
from __future__ import annotations

import os
import sys
import tempfile
import time


def _forget_process_caches(cf) -> None:
    cf._FILES.clear()
    cf._DISKS.clear()
    cf._FOUND.clear()


def _round(cf, stages) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    out, fps = {}, {}
    for name, module in stages.items():
        t0, c0 = time.perf_counter(), time.process_time()
        fps[name] = cf.code_fingerprint(module)
        out[name] = (time.perf_counter() - t0, time.process_time() - c0)
    return out, fps


def main() -> None:
    from components import code_fingerprint as cf
    from components.lineage import STAGES

    with tempfile.TemporaryDirectory() as home:
        os.environ["RLVR_HOME"] = home
        _forget_process_caches(cf)
        cold, fps = _round(cf, STAGES)
        _forget_process_caches(cf)
        fresh, fps2 = _round(cf, STAGES)
        repeat, fps3 = _round(cf, STAGES)
    assert fps == fps2 == fps3, "the caches changed a fingerprint"
    print(f"{'stage':14s} {'modules':>7s}  {'cold ms (CPU)':>16s}  {'fresh process':>16s}  {'repeat':>16s}")
    for name, module in STAGES.items():
        cells = "  ".join(f"{w * 1e3:7.1f} ({c * 1e3:5.1f})" for w, c in (cold[name], fresh[name], repeat[name]))
        print(f"{name:14s} {len(cf.module_files(module)):7d}  {cells}  {fps[name][:12]}")
    total = "  ".join(f"{sum(w for w, _ in r.values()) * 1e3:7.1f} ({sum(c for _, c in r.values()) * 1e3:5.1f})"
                      for r in (cold, fresh, repeat))
    print(f"{'all stages':14s} {'':7s}  {total}")
    walls = [sum(w for w, _ in r.values()) for r in (cold, fresh, repeat)]
    print(f"cold / repeat: {walls[0] / walls[2]:.1f}x; fresh process / repeat: {walls[1] / walls[2]:.1f}x")
    heavy = [m for m in ("torch", "transformers", "mlflow", "math_verify", "airflow") if m in sys.modules]
    print(f"heavy modules imported: {heavy or 'none'}")


if __name__ == "__main__":
    main()
