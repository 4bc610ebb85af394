"""Cold start and staleness of difficulty estimators on a simulated training run.

Population: synthetic arithmetic prompts (components.data.synthetic, 2-6 terms). The
simulated policy's true pass rate of prompt i at step t is
    logit p_i(t) = base - slope * (terms_i - 2) + u_i + drift * t,   u_i ~ N(0, noise^2),
a simulation assumption (difficulty follows the problem's structure plus an idiosyncratic
part, and the policy improves). Each step draws a batch (seeded permutations, as the
trainer does), every estimator predicts the batch's pass rates *before* its rollouts, then
n Bernoulli(p_i(t)) rewards per prompt are drawn and every estimator observes them.
Reported: mean absolute error against the true p_i(t), split into cold prompts (never
rolled out before) and warm ones (seen; with the mean number of steps since last seen).

Estimators: ``last``: the prompt's last observed pass rate (0.5 unseen; GRESO/VSR's
history); ``beta``: the prompt's own Beta(1,1) posterior mean with the graph's count decay;
``graph``: components.methods.difficulty_graph (MiniLM + reasoning signature);
``graph_sem``: the same with the semantic term only; ``vip_gp``: VIP's GP.

    .venv/bin/python bench/difficulty_staleness.py [--prompts 1024] [--steps 64] [--batch 64]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from components.data.synthetic import generate_problems  # noqa: E402
from components.methods.difficulty_graph import GraphDifficulty, GraphDifficultyConfig  # noqa: E402
from components.methods.vip import MiniLMEmbedder, PoolGP, median_bandwidth, sigmoid  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--drift", type=float, default=0.03, help="logit gain of the policy per step")
    ap.add_argument("--noise", type=float, default=0.5, help="std of the per-prompt logit offset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--graph", default="{}", help="JSON overrides of GraphDifficultyConfig for 'graph'")
    ap.add_argument("--embeddings", default=None, help=".npy cache of the prompts' MiniLM embeddings")
    args = ap.parse_args()

    probs = generate_problems(args.prompts, [2, 3, 4, 5, 6], seed=args.seed)
    uids = [p.uid for p in probs]
    rng = np.random.default_rng(args.seed)
    terms = np.array([len(p.meta["terms"]) for p in probs], dtype=float)
    logit0 = 1.5 - 1.0 * (terms - 2) + args.noise * rng.standard_normal(len(probs))

    t0 = time.perf_counter()
    cache = Path(args.embeddings) if args.embeddings else None
    E = np.load(cache) if cache and cache.exists() else MiniLMEmbedder().embed([p.prompt for p in probs])
    if cache and not cache.exists():
        np.save(cache, E)
    t_embed = time.perf_counter() - t0
    over = json.loads(args.graph)
    graphs = {"graph": GraphDifficulty(GraphDifficultyConfig(**over)),
              "graph_sem": GraphDifficulty(GraphDifficultyConfig(**{**over, "reasoning_weight": 0.0}))}
    t0 = time.perf_counter()
    for g in graphs.values():
        g.fit_pool(probs, E)
    t_build = (time.perf_counter() - t0) / len(graphs)
    gp = PoolGP()
    gp.add(uids, E)
    gp.h = median_bandwidth(E)
    decay = GraphDifficultyConfig().decay
    last = np.full(len(probs), np.nan)
    s_own, f_own, last_seen = np.zeros(len(probs)), np.zeros(len(probs)), np.full(len(probs), -1)
    names = ["last", "beta", "graph", "graph_sem", "vip_gp"]
    err = {k: {"cold": [], "warm": []} for k in names}
    gaps, t_obs = [], 0.0
    for step in range(args.steps):
        epoch, off = divmod(step * args.batch, len(probs))
        rows = np.random.default_rng([args.seed, epoch]).permutation(len(probs))[off:off + args.batch]
        p_true = sigmoid(logit0[rows] + args.drift * step)
        bu = [uids[i] for i in rows]
        pred = {"last": np.where(np.isnan(last[rows]), 0.5, last[rows]),
                "beta": (1 + s_own[rows]) / (2 + s_own[rows] + f_own[rows]),
                "vip_gp": gp.predict(bu)}
        pred.update({k: g.predict(bu) for k, g in graphs.items()})
        cold = last_seen[rows] < 0
        gaps += (step - last_seen[rows][~cold]).tolist()
        for k in names:
            e = np.abs(pred[k] - p_true)
            err[k]["cold"] += e[cold].tolist()
            err[k]["warm"] += e[~cold].tolist()
        succ = rng.binomial(args.n, p_true).astype(float)
        t0 = time.perf_counter()
        graphs["graph"].observe(bu, succ, np.full(len(bu), float(args.n)), step)
        t_obs += time.perf_counter() - t0
        graphs["graph_sem"].observe(bu, succ, np.full(len(bu), float(args.n)), step)
        gp.update(bu, succ / args.n)
        s_own *= decay
        f_own *= decay
        s_own[rows] += succ
        f_own[rows] += args.n - succ
        last[rows] = succ / args.n
        last_seen[rows] = step

    n_cold, n_warm = len(err["last"]["cold"]), len(err["last"]["warm"])
    print(f"simulated run: {args.prompts} prompts, {args.steps} steps x {args.batch} prompts x n={args.n}, "
          f"drift {args.drift}/step, noise {args.noise}, seed {args.seed}")
    print(f"predictions: {n_cold} cold (never rolled out), {n_warm} warm "
          f"(mean {np.mean(gaps) if gaps else float('nan'):.1f} steps since last seen)")
    print(f"graph config overrides: {over or 'none (defaults)'}")
    print(f"{'estimator':12s} {'MAE cold':>9s} {'MAE warm':>9s} {'MAE all':>9s}")
    for k in names:
        c, w = err[k]["cold"], err[k]["warm"]
        print(f"{k:12s} {np.mean(c) if c else float('nan'):9.4f} {np.mean(w) if w else float('nan'):9.4f} "
              f"{np.mean(c + w):9.4f}")
    print(f"graph: embed {t_embed:.1f} s, build {t_build:.2f} s, observe {1000 * t_obs / args.steps:.1f} ms/step")


if __name__ == "__main__":
    main()
