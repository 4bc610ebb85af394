"""TRACE: Tree Rollout Allocation for Contrastive Exploration (Zou et al., arXiv 2606.11119;
known from its abstract; no public code). A method for episodes only (its anchors are turn
prefixes; ``components.methods.registry`` refuses it on math). Rules, the
abstract sentence each comes from, and our choices ([ours], knobs of :class:`TRACEConfig`):

1. "modeling each ReAct-style thought-action-observation turn as a semantically distinct
   node, allowing budget allocation to extend from prompt roots to turn-level prefixes with
   further continuations, which naturally forms tree-structured rollouts." Anchors are the
   batch's map seeds (roots, no action yet) and turn prefixes (seed, first i actions) of
   episodes already played, 0 < i < episode length; a group of ``n`` continuations from an
   anchor is a new subtree, whose own prefixes become anchors in turn. [ours] A method
   plays one round per update, so the tree grows across updates: an anchor is a
   prefix of an episode of the last ``window_steps`` updates (at most ``max_anchors``, the
   newest kept).
2. "TRACE allocates rollout budget to both prompt roots and intermediate prefixes that are
   most likely to yield mixed terminal rewards." Each anchor's score is p_hat (1 - p_hat)
   [ours: the Bernoulli variance as "likely to yield mixed rewards"]; the B groups of an
   update go to B anchors drawn without replacement in proportion to score + ``score_floor``
   [ours: proportional, as VSR draws its replays; ``selection: top`` takes the B best], roots
   and prefixes competing for the same budget (no fixed replay share). Budget: B n episodes per update.
3. "A shared generalizable predictor estimates conditional success probability at these
   anchors from prefix histories to guide this allocation." One logistic regression over
   all seeds, p_hat = sigmoid(w . phi(anchor)), with phi [ours] = (1, depth / ``horizon``,
   cumulative reward of the prefix / 10, share of invalid actions in it, reward of its last
   turn, p0 of its seed (latest root-group success rate), is-root). Trained online [ours]:
   after every update, ``sgd_epochs`` passes of full-batch gradient steps (rate ``lr``, L2
   ``l2``) on that update's examples: every anchor an episode passed through (its start and
   each of its generated turn prefixes) labelled with the episode's success.
"""
from __future__ import annotations

import json
import math
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from components.agentic.rollout import EpisodeContext, EpisodeGroup, EpisodeRun, Start, episode_runs
from components.methods.base import Method, MethodConfig

DIM = 7


def features(depth: int, cum_reward: float, invalid: int, last_reward: float, p0: float, horizon: int) -> np.ndarray:
    """phi(anchor); a root has depth 0 and no history."""
    return np.array([1.0, depth / horizon, cum_reward / 10.0, invalid / depth if depth else 0.0,
                     last_reward, p0, float(depth == 0)])


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.asarray(z, dtype=float)))


def logistic_step(w: np.ndarray, X: np.ndarray, y: np.ndarray, lr: float, l2: float) -> np.ndarray:
    """One full-batch gradient step on the mean log-loss + (l2 / 2) |w|^2."""
    grad = X.T @ (sigmoid(X @ w) - y) / len(y) + l2 * w
    return w - lr * grad


def draw(scores: np.ndarray, k: int, floor: float, how: str, rng: np.random.Generator) -> list[int]:
    """k indices without replacement: proportional to score + floor, or the top k (ties: earlier)."""
    k = min(k, len(scores))
    if how == "top":
        return sorted(np.lexsort((np.arange(len(scores)), -scores))[:k].tolist())
    w = scores + floor
    return sorted(rng.choice(len(scores), size=k, replace=False, p=w / w.sum()).tolist())


class TRACEConfig(MethodConfig):
    n: int = Field(8, ge=1, description="episodes per anchor")
    horizon: int = Field(15, ge=1, description="turn scale of the depth feature (max_steps)")
    window_steps: int = Field(4, ge=1, description="anchors from episodes of the last this many updates")
    max_anchors: int = Field(4096, ge=1)
    selection: Literal["proportional", "top"] = "proportional"
    score_floor: float = Field(0.01, gt=0.0)
    lr: float = Field(0.5, gt=0.0)
    l2: float = Field(1e-3, ge=0.0)
    sgd_epochs: int = Field(20, ge=1)
    p0_default: float = Field(0.0, ge=0.0, le=1.0)


class TRACE(Method):
    name = "trace"
    Config = TRACEConfig

    def __init__(self, config: TRACEConfig):
        super().__init__(config)
        self.w = np.zeros(DIM)
        self.p0: dict[int, float] = {}
        # anchor key -> [seed, actions, depth, cum_reward, invalid, last_reward, inserted step]
        self.anchors: dict[str, list] = {}
        self.step = 0

    def setup(self, seeds: Sequence[int], resources: dict[str, Any]) -> None:
        for s, rate in (resources.get("p0") or {}).items():
            self.p0.setdefault(int(s), float(rate))

    # ---- prediction and selection ------------------------------------------------------
    def phi(self, a: list) -> np.ndarray:
        seed, _, depth, cum, invalid, last, _ = a
        return features(depth, cum, invalid, last, self.p0.get(seed, self.config.p0_default), self.config.horizon)

    def predict(self, rows: Sequence[list]) -> np.ndarray:
        return sigmoid(np.stack([self.phi(a) for a in rows]) @ self.w) if rows else np.zeros(0)

    def rollout(self, batch: Sequence[int], ctx: EpisodeContext, rng: np.random.Generator) -> list[EpisodeGroup]:
        self.step = ctx.step
        self._evict()
        pool = [[int(s), [], 0, 0.0, 0, 0.0, self.step] for s in batch] + list(self.anchors.values())
        p = self.predict(pool)
        picked = draw(p * (1 - p), len(batch), self.config.score_floor, self.config.selection, rng)
        out = []
        for i in picked:
            seed, acts, depth = pool[i][0], pool[i][1], pool[i][2]
            out.append(Start(seed, tuple(acts), _key(seed, acts) if acts else f"{seed}", self.config.n,
                             (("p_hat", float(p[i])), ("depth", depth), ("anchor", _key(seed, acts)))))
        roots = sum(1 for s in out if not s.prefix)
        self.last_stats = {"roots": float(roots), "prefixes": float(len(out) - roots),
                           "anchors": float(len(self.anchors)),
                           "p_hat_mean": float(np.mean([dict(s.meta)["p_hat"] for s in out])) if out else math.nan}
        return ctx.sample_groups(out, self.config.n)

    # ---- learning -----------------------------------------------------------------------
    def observe(self, groups: Sequence[EpisodeGroup]) -> None:
        c, step = self.config, self.step
        runs = episode_runs(groups)
        X, y = [], []
        by_group: dict[str, list[EpisodeRun]] = {}
        for r in runs:
            by_group.setdefault(r.start.group_id(), []).append(r)
        for rs in by_group.values():
            if not rs[0].start.prefix:
                self.p0[rs[0].start.seed] = float(np.mean([r.won for r in rs]))
        for r in runs:
            meta = dict(r.start.meta)
            base = self.anchors.get(meta.get("anchor", ""), [r.start.seed, list(r.start.prefix), len(r.start.prefix),
                                                             0.0, 0, 0.0, step])
            seed, acts, depth, cum, invalid, last = base[0], list(base[1]), base[2], base[3], base[4], base[5]
            X.append(self.phi([seed, acts, depth, cum, invalid, last, step]))
            for j, t in enumerate(r.turns):
                acts, depth = acts + [t.text], depth + 1
                cum, invalid, last = cum + t.reward, invalid + (not t.valid), t.reward
                row = [seed, acts, depth, cum, invalid, last, step]
                X.append(self.phi(row))
                if j < len(r.turns) - 1:          # the episode went on from here: an anchor
                    self.anchors.pop(_key(seed, acts), None)
                    self.anchors[_key(seed, acts)] = row
            y += [float(r.won)] * (len(r.turns) + 1)
        if X:
            X, y = np.stack(X), np.array(y)
            for _ in range(c.sgd_epochs):
                self.w = logistic_step(self.w, X, y, c.lr, c.l2)
            self.last_stats["train_logloss"] = float(-np.mean(y * np.log(sigmoid(X @ self.w) + 1e-12)
                                                              + (1 - y) * np.log(1 - sigmoid(X @ self.w) + 1e-12)))
        self._evict()

    def _evict(self) -> None:
        old = [k for k, a in self.anchors.items() if self.step - a[6] >= self.config.window_steps]
        for k in old:
            del self.anchors[k]
        while len(self.anchors) > self.config.max_anchors:   # insertion order: oldest first
            del self.anchors[next(iter(self.anchors))]

    def rollouts_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.n

    def state_dict(self) -> dict[str, Any]:
        return {"w": self.w.tolist(), "p0": {str(k): v for k, v in self.p0.items()},
                "anchors": [[a[0], list(a[1]), *a[2:]] for a in self.anchors.values()], "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.w = np.array(state["w"], dtype=float)
        self.p0 = {int(k): float(v) for k, v in state["p0"].items()}
        self.anchors = {_key(int(a[0]), list(a[1])): [int(a[0]), list(a[1]), int(a[2]), float(a[3]), int(a[4]),
                                                      float(a[5]), int(a[6])] for a in state["anchors"]}
        self.step = int(state["step"])


def _key(seed: int, actions: Sequence[str]) -> str:
    """An anchor's key (and group id): actions are free text, so JSON, not a separator."""
    return json.dumps([seed, *actions])
