"""Grading throughput: the project's Grader (zygote-forked workers, hard time limit, LRU cache)
vs ``pebble.ProcessPool`` + ``cachetools.LRUCache`` doing the same work, vs a plain
single-process math-verify loop.

Two workloads:

- ordinary: model-like outputs of the synthetic task (a trace ending in ``\\boxed{}``, 30 %
  correct, answers repeating as they do in real rollouts);
- hostile: the bad-input corpus (``tests/bad_input/corpus/grader_outputs.jsonl``: answers that
  time math-verify out, megabyte outputs, ...), graded as one batch with a 2 s limit per item;
- hostile, hard kills: the same with math-verify's own timeout set to 30 s, so that every slow
  item is stopped by the pool killing and replacing its worker (the second line of defence).

Both pools get 2 workers, the same per-item limit, the same parent-side answer extraction and
cache, and workers that imported math-verify before the clock starts (pebble: forkserver with
math-verify preloaded, so a replaced worker starts warm as in the Grader). The two pools run
interleaved, repeat by repeat, so that both see the same machine load. Prints items/s per pool
and workload (best and median of the repeats), reasons agreement, worker restarts (last repeat),
and the ratios of the best times last.

``--against REV``: also the Grader of commit REV (its ``components/reward`` checked out into a
temporary directory) against this tree's, on the ordinary and hostile workloads: each timed in a
fresh child process per repeat, the two interleaved, with their reasons compared.

    .venv/bin/python bench/grading_throughput.py [--n 3000] [--repeats 3] [--against REV]
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import multiprocessing as mp
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "bad_input" / "corpus" / "grader_outputs.jsonl"
HOSTILE_TIMEOUT_S = 2.0


def synthetic(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    texts, golds = [], []
    for _ in range(n):
        gold = rng.randint(-30, 30)
        ans = gold if rng.random() < 0.3 else rng.randint(-30, 30)
        texts.append(f" 4+5=9. 9-3=6. \\boxed{{{ans}}}")
        golds.append(str(gold))
    return texts, golds


def hostile() -> tuple[list, list[str]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from bad_input.conftest import jsonl_cases, model_output

    cases = jsonl_cases(CORPUS.name)
    marker = Path("/nonexistent/never-created")
    return [model_output(c, marker) for c in cases], [c["gold"] for c in cases]


def plain_loop(texts, golds) -> list[float]:
    from math_verify import parse, verify

    out = []
    for t, g in zip(texts, golds):
        try:
            out.append(float(verify(parse(f"\\boxed{{{g}}}"), parse(t))))
        except Exception:  # noqa: BLE001 - the baseline just scores 0 like the grader would
            out.append(0.0)
    return out


class PebbleGrader:
    """The Grader's job done with pebble.ProcessPool (per-item timeout, worker replacement) and
    a cachetools LRU cache; answer extraction and the worker function are the Grader's own."""

    def __init__(self, workers: int, timeout_s: float, inner: int | None = None, cache_size: int = 100_000):
        from cachetools import LRUCache
        from pebble import ProcessPool

        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["math_verify", "components.reward.worker"])
        self.pool = ProcessPool(max_workers=workers, context=ctx)
        self.timeout_s, self.inner = timeout_s, inner or max(1, int(timeout_s // 2))
        self.cache: LRUCache = LRUCache(maxsize=cache_size) if cache_size else None
        self.restarts = 0

    def grade_batch(self, responses, golds) -> list[tuple[float, str]]:
        from pebble import ProcessExpired

        from components.reward.grader import _as_text, extract_answer
        from components.reward.worker import _grade_pair

        out: list = [None] * len(responses)
        pending: dict[tuple[str, str], list[int]] = {}
        for i, (r, g) in enumerate(zip(responses, golds)):
            ans = extract_answer(_as_text(r))
            if ans is None:
                out[i] = (0.0, "no_answer")
            elif len(ans) > 10_000:
                out[i] = (0.0, "unparsable")
            elif self.cache is not None and (key := (_as_text(g), ans)) in self.cache:
                out[i] = self.cache[key]
            else:
                pending.setdefault((_as_text(g), ans), []).append(i)
        futures = {k: self.pool.schedule(_grade_pair, args=(k[0], k[1], self.inner), timeout=self.timeout_s)
                   for k in pending}
        for k, f in futures.items():
            try:
                res = f.result()
            except (FutureTimeout, TimeoutError):
                res, self.restarts = (0.0, "timeout"), self.restarts + 1
            except ProcessExpired:
                res, self.restarts = (0.0, "error"), self.restarts + 1
            if self.cache is not None and res[1] not in ("timeout", "error"):
                self.cache[k] = res
            for i in pending[k]:
                out[i] = res
        return out

    def close(self) -> None:
        self.pool.stop()
        self.pool.join()


def run_once(grader_factory, texts, golds):
    """Seconds to grade one batch with a fresh (cold-cache, warm-worker) grader, its results and
    its worker restarts."""
    g, grade, n_restarts = grader_factory()
    try:
        grade(["\\boxed{1000}"] * 4, ["1000"] * 4)  # workers up, outside the timing
        t0 = time.perf_counter()
        res = grade(texts, golds)
        return time.perf_counter() - t0, res, n_restarts()
    finally:
        g.close()


def ours(timeout_s: float, inner: int | None = None):
    from components.reward.grader import Grader

    def factory():
        g = Grader(workers=2, timeout_s=timeout_s, inner_timeout_s=inner)
        return g, lambda t, gs: [(x.score, x.reason) for x in g.grade_batch(t, gs)], \
            lambda: g.stats["worker_starts"] - 2

    return factory


def pebble(timeout_s: float, inner: int | None = None):
    def factory():
        g = PebbleGrader(workers=2, timeout_s=timeout_s, inner=inner)
        return g, g.grade_batch, lambda: g.restarts

    return factory


def grader_at(rev: str, into: Path) -> Path:
    """``components/reward`` of commit ``rev`` under ``into`` (a root its zygote can run from)."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "components/__init__.py", "components/reward"],
                         capture_output=True, check=False)
    if tar.returncode:
        raise SystemExit(f"--against {rev}: git archive failed: {tar.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        t.extractall(into, filter="data")
    return into


def _encode(x):
    """A model output as JSON: text as itself, bytes and other values (hostile outputs) tagged."""
    if isinstance(x, str):
        return x
    if isinstance(x, (bytes, bytearray)):
        return {"b64": base64.b64encode(bytes(x)).decode()}
    return {"json": x}


def _decode(x):
    if isinstance(x, dict):
        return base64.b64decode(x["b64"]) if "b64" in x else x["json"]
    return x


def timed_in_child(root: Path, inputs: Path, timeout_s: float) -> tuple[float, list[str]]:
    """Seconds for one grade_batch by the Grader under ``root`` (fresh process, workers warm), and
    its reasons."""
    out = subprocess.run([sys.executable, __file__, "--child", str(root), str(inputs), str(timeout_s)],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"grader under {root} failed: {out.stderr.strip()[-600:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return res["secs"], res["reasons"]


def child(root: str, inputs: str, timeout_s: str) -> None:
    sys.path.insert(0, root)  # before this tree: the Grader under test is the one under root
    from components.reward.grader import Grader

    texts, golds = json.loads(Path(inputs).read_text())
    texts = [_decode(t) for t in texts]
    with Grader(workers=2, timeout_s=float(timeout_s)) as g:
        g.grade_batch(["\\boxed{1000}"] * 4, ["1000"] * 4)  # workers up, outside the timing
        t0 = time.perf_counter()
        res = g.grade_batch(texts, golds)
        secs = time.perf_counter() - t0
    print(json.dumps({"secs": secs, "reasons": [x.reason for x in res]}))


def against(rev: str, workloads: dict, repeats: int) -> None:
    """This tree's Grader vs commit ``rev``'s, same inputs, interleaved repeat by repeat."""
    with tempfile.TemporaryDirectory() as tmp:
        old = grader_at(rev, Path(tmp) / "old")
        times: dict = {}
        reasons: dict = {}
        for _ in range(repeats):
            for w, (limit, texts, golds) in workloads.items():
                inputs = Path(tmp) / f"{w}.json"
                inputs.write_text(json.dumps([[_encode(t) for t in texts], golds]))
                for name, root in (("now", ROOT), (rev, old)):
                    secs, rs = timed_in_child(root, inputs, limit)
                    times.setdefault((w, name), []).append(secs)
                    reasons[(w, name)] = rs
    for w, (_, texts, _) in workloads.items():
        now, then = min(times[(w, "now")]), min(times[(w, rev)])
        same = sum(a == b for a, b in zip(reasons[(w, "now")], reasons[(w, rev)]))
        print(f"Grader now vs at {rev}, {w:8s}: {len(texts) / now:6.0f} vs {len(texts) / then:6.0f} items/s "
              f"(best of {repeats}), now/then speed {then / now:.3f}x; same reason on {same}/{len(texts)}")
        for i, (a, b) in enumerate(zip(reasons[(w, "now")], reasons[(w, rev)])):
            if a != b:
                print(f"  {w} item {i}: now {a}, at {rev} {b}: {texts[i][:80]!r}")


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        return child(*sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--against", default=None, metavar="REV", help="also time the Grader of this commit")
    ap.add_argument("--only-against", action="store_true", help="with --against: skip the pebble comparison")
    args = ap.parse_args()
    texts, golds = synthetic(args.n)
    h_texts, h_golds = hostile()
    if args.against:
        against(args.against, {"ordinary": (5.0, texts, golds), "hostile": (HOSTILE_TIMEOUT_S, h_texts, h_golds)},
                args.repeats)
        if args.only_against:
            return

    t0 = time.perf_counter()
    base = plain_loop(texts, golds)
    t_plain = time.perf_counter() - t0
    rows = {}
    workloads = {"ordinary": (5.0, None, texts, golds), "hostile": (HOSTILE_TIMEOUT_S, None, h_texts, h_golds),
                 "hostile, hard kills": (HOSTILE_TIMEOUT_S, 30, h_texts, h_golds)}
    pools = (("Grader", ours), ("pebble+cachetools", pebble))
    times: dict = {}
    for _ in range(args.repeats):  # interleaved, so that both pools see the same machine load
        for w, (limit, inner, t, gs) in workloads.items():
            for name, make in pools:
                secs, res, restarts = run_once(make(limit, inner), t, gs)
                times.setdefault((name, w), []).append(secs)
                rows[(name, w)] = dict(res=res, restarts=restarts)
    for k, ts in times.items():
        rows[k].update(best=min(ts), med=statistics.median(ts))
    print(f"plain math-verify loop, ordinary: {len(texts) / t_plain:8.0f} items/s")
    cases = [json.loads(ln) for ln in CORPUS.read_text().splitlines() if ln.strip()]
    for (name, w), r in rows.items():
        if w == "ordinary":
            agree = sum(a == s for a, (s, _) in zip(base, r["res"])) / len(base)
            print(f"{name:18s} {w:20s} {len(texts) / r['best']:6.0f} items/s (best of {args.repeats}; "
                  f"median {len(texts) / r['med']:.0f}), agreement with the plain loop {agree:.4f}")
        else:
            expected = sum(reason in c["reasons"] for c, (_, reason) in zip(cases, r["res"]))
            print(f"{name:18s} {w:20s} {r['best']:6.1f} s for {len(h_texts)} outputs (median {r['med']:.1f} s), "
                  f"worker restarts {r['restarts']}, reasons as the corpus expects {expected}/{len(cases)}, "
                  f"{dict(sorted(Counter(x for _, x in r['res']).items()))}")
    def ratio(w: str) -> float:  # > 1: the Grader is faster
        return rows[("pebble+cachetools", w)]["best"] / rows[("Grader", w)]["best"]
    print(f"Grader / plain loop, ordinary: {t_plain / rows[('Grader', 'ordinary')]['best']:.2f}x on {len(texts)} responses")
    print("Grader / pebble: " + ", ".join(f"{w} {ratio(w):.2f}x" for w in workloads) + " (>1: the Grader is faster)")

if __name__ == "__main__":
    main()
