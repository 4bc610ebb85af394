"""Reinforce-Ada-Est: estimator-guided rollout allocation (docs/methods.md §5b).

Source: Xiong et al., "Reinforce-Ada" (arXiv 2510.04996 v3), Algorithm 1 (the ``Est``
variant; the released RLHFlow/Reinforce-Ada code implements only ``Seq``):

1. p_hat_x from the Ada-EMA estimator: N_tot <- lam*N_tot + n_t, N_pos <- lam*N_pos + k_t,
   p_hat = (N_pos + a) / (N_tot + a + b);
2. N_x proportional to 1/sqrt(p_hat_x + eps), N_min <= N_x <= N_max, sum N_x = n_mean * B
   (``allocate``: bisection on the proportionality constant, then largest-remainder
   rounding within the bounds, so the sum is exact);
3. sample N_x responses; r_bar_x = their mean reward;
4. explicit weight alpha_x = 1/sqrt(r_bar_x + eps); advantage A_i = (r_i - r_bar_x) * alpha_x;
5. update the estimator (``observe``).

The trainer computes advantages itself. Step 4's weight is kept in ``Group.meta["adv_weight"]``
(``weight_mode="meta"``, default) and returned by ``advantage_weight``: the trainer multiplies
each sequence's advantage by it. Use ``adv_estimator="drgrpo"`` for A_i = r_i - r_bar (the paper's form).
``weight_mode="rewards"`` instead multiplies the group's rewards by alpha_x, which gives the
same advantages with ``drgrpo``/``rloo`` (linear in r) and no trainer change, but scales the
logged rewards (the raw ones stay in ``meta["raw_rewards"]``); it is a no-op under ``grpo``.
``weight_mode="none"`` drops the weight (pure allocation ablation).

Open choices, as config knobs:
- ``lam`` = 0.9 [INF; NF in the paper]; the decay is applied to a prompt's counts each
  time that prompt is observed (not every step);
- prior Beta(a, b) = Beta(0.5, 0.5) [SEC: third-party re-implementation]; an unseen
  prompt has p_hat = a / (a + b) = 0.5;
- k_t = number of rewards > ``positive_threshold`` (0.5) [INF];
- ``eps`` = 1e-6 [INF] in both 1/sqrt(p_hat + eps) and 1/sqrt(r_bar + eps) (with a
  Beta prior p_hat > 0 anyway; with r_bar = 0 all advantages are 0 whatever the weight);
- ``n_mean`` = 8 ("hyper-parameter 8"), [n_min, n_max] = [4, 32] (the paper).
"""
from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from components.data.schema import Problem
from components.methods.base import Group, Method, MethodConfig, RolloutContext, Stateless
from components.methods.dapo import discard


def allocate(p_hat: Sequence[float], total: int, n_min: int, n_max: int, eps: float = 1e-6) -> list[int]:
    """Integers N_x in [n_min, n_max], sum exactly ``total``, N_x ~ c / sqrt(p_hat_x + eps).

    The continuous N_x(c) = clip(c * w_x, n_min, n_max) is found by bisection on c so that
    sum N_x(c) = total; then floor, and hand the remaining units one at a time to the largest
    fractional parts (ties: lowest index) among those below n_max.
    """
    B = len(p_hat)
    if B == 0:
        if total != 0:
            raise ValueError("allocate: no prompts but a non-zero total")
        return []
    if not (B * n_min <= total <= B * n_max):
        raise ValueError(f"allocate: total {total} outside [{B * n_min}, {B * n_max}] for {B} prompts")
    w = 1.0 / np.sqrt(np.clip(np.asarray(p_hat, dtype=float), 0.0, None) + eps)

    def cont(c: float) -> np.ndarray:
        return np.clip(c * w, n_min, n_max)

    lo, hi = 0.0, n_max / float(w.min())
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if cont(mid).sum() < total:
            lo = mid
        else:
            hi = mid
    x = cont(hi)
    n = np.clip(np.floor(x + 1e-9), n_min, n_max).astype(int)
    frac = x - n
    while n.sum() < total:
        cand = np.where(n < n_max, frac, -np.inf)
        i = int(np.argmax(cand))
        n[i] += 1
        frac[i] -= 1.0
    while n.sum() > total:
        cand = np.where(n > n_min, frac, np.inf)
        i = int(np.argmin(cand))
        n[i] -= 1
        frac[i] += 1.0
    return n.tolist()


class ReinforceAdaEstConfig(MethodConfig):
    n_mean: int = Field(8, ge=1, description="average samples per prompt: budget = n_mean * batch")
    n_min: int = Field(4, ge=1)
    n_max: int = Field(32, ge=1)
    lam: float = Field(0.9, gt=0.0, le=1.0, description="Ada-EMA decay lambda")
    prior_a: float = Field(0.5, gt=0.0)
    prior_b: float = Field(0.5, gt=0.0)
    eps: float = Field(1e-6, gt=0.0)
    positive_threshold: float = 0.5
    weight_mode: Literal["meta", "rewards", "none"] = "meta"

    @model_validator(mode="after")
    def _bounds(self):
        if not self.n_min <= self.n_mean <= self.n_max:
            raise ValueError(f"need n_min <= n_mean <= n_max, got {self.n_min}, {self.n_mean}, {self.n_max}")
        return self


class ReinforceAdaEst(Method):
    name = "reinforce_ada_est"
    Config = ReinforceAdaEstConfig

    def __init__(self, config: ReinforceAdaEstConfig):
        super().__init__(config)
        self.ema: dict[str, list[float]] = {}     # problem uid -> [N_tot, N_pos]

    def p_hat(self, uid: str) -> float:
        c = self.config
        tot, pos = self.ema.get(uid, (0.0, 0.0))
        return (pos + c.prior_a) / (tot + c.prior_a + c.prior_b)

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        c = self.config
        p = [self.p_hat(q.uid) for q in batch]
        ns = allocate(p, c.n_mean * len(batch), c.n_min, c.n_max, c.eps)
        groups = ctx.sample_groups(ctx.prompt_items(batch), ns)
        for g, ph, k in zip(groups, p, ns):
            r_bar = float(np.mean(g.rewards)) if g.rewards else 0.0
            weight = 1.0 / math.sqrt(max(r_bar, 0.0) + c.eps)
            g.meta.update(p_hat=ph, n_alloc=k, raw_rewards=list(g.rewards))
            if c.weight_mode == "meta":
                g.meta["adv_weight"] = weight
            elif c.weight_mode == "rewards":
                g.meta["reward_weight"] = weight
                g.rewards = [r * weight for r in g.rewards]
        return groups

    def observe(self, groups: list[Group]) -> None:
        c = self.config
        for g in groups:
            raw = g.meta.get("raw_rewards", g.rewards)
            tot, pos = self.ema.get(g.problem_uid, (0.0, 0.0))
            k = sum(1 for r in raw if r > c.positive_threshold)
            self.ema[g.problem_uid] = [c.lam * tot + len(raw), c.lam * pos + k]

    def rollouts_per_step(self, batch_size: int) -> int:
        return batch_size * self.config.n_mean

    def advantage_weight(self, group: Group) -> float:
        """Step 4's alpha_x (``weight_mode="meta"``; 1 otherwise)."""
        return float(group.meta.get("adv_weight", 1.0))

    def step_stats(self) -> dict[str, float]:
        return {"tracked_prompts": float(len(self.ema))}

    def state_dict(self) -> dict[str, Any]:
        return {"ema": {u: list(v) for u, v in self.ema.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ema = {u: [float(v[0]), float(v[1])] for u, v in state["ema"].items()}


# ====================================================================== Reinforce-Ada-Seq
def seq_keep_counts(n_pos: int, n_neg: int, n: int, choice: str, finished: bool) -> tuple[int, int]:
    """(positives, negatives) kept from a prompt's caches: the first ones of each, in order.

    ``finished`` (the exit rule fired): verl ``downsample_cache``: kp = min(n//2, pos),
    kn = min(n - kp, neg), then the shortfall is filled from the positives.
    Otherwise the ``max_rounds`` fallback: take = min(n, pos + neg); balanced targets
    (n//2, n - n//2); positive-focused target_pos = max(min(ceil(pos/total * n), take - 1), 1),
    target_neg = take - target_pos; each side is capped by what it has and the shortfall is
    filled from the positives if any are left, else from the negatives.
    """
    if finished:
        kp = min(n // 2, n_pos)
        return _fill(kp, min(n - kp, n_neg), n_pos, n_neg, n)
    total = n_pos + n_neg
    take = min(n, total)
    if choice == "positive_focused":
        ratio = n_pos / total if total > 0 else 0.0
        tp = max(min(math.ceil(ratio * n), take - 1), 1)
        tn = take - tp
    else:
        tp, tn = n // 2, n - n // 2
    return _fill(min(n_pos, tp), min(n_neg, tn), n_pos, n_neg, take)


def _fill(kp: int, kn: int, n_pos: int, n_neg: int, size: int) -> tuple[int, int]:
    """Top (kept positives, kept negatives) up to ``size``: from the positives left, else
    from the negatives left."""
    if kp + kn < size:
        if n_pos > kp:
            kp += min(n_pos - kp, size - kp - kn)
        elif n_neg > kn:
            kn += min(n_neg - kn, size - kp - kn)
    return kp, kn


def global_stats(n_pos: int, n_neg: int, eps: float = 1e-6) -> tuple[float, float]:
    """verl ``_compute_with_global_stats``: (mean, std) of ``n_pos`` ones and ``n_neg`` zeros.

    std = max(unbiased std, eps); a prompt with at most one sample gets (0, 1).
    """
    total = n_pos + n_neg
    if total <= 1:
        return 0.0, 1.0
    mean = n_pos / total
    std = math.sqrt(n_pos * n_neg / (total * (total - 1)))     # torch.std (ddof = 1) of the 0/1 list
    return mean, max(std, eps)


class ReinforceAdaSeqConfig(MethodConfig):
    max_rounds: int = Field(4, ge=1)
    round_repeat: int = Field(8, ge=1, description="M: samples per active prompt per round")
    positive_threshold: float = Field(0.7, description="reward > threshold counts as positive")
    final_keep: int = Field(4, ge=1, description="n: samples kept per prompt (verl final_keep_per_prompt)")
    choice: Literal["balanced", "positive_focused"] = "balanced"
    global_stat_est: bool = True
    norm_adv_by_std: bool = False       # the script's norm_adv_by_std_in_grpo=False
    eps: float = Field(1e-6, gt=0.0)


class ReinforceAdaSeq(Stateless):
    """Reinforce-Ada-Seq (docs/methods.md §5a), after the authors' verl code
    (``RayPPOTrainer._generate_multi_round_adaptive_downsampling`` and
    ``compute_grpo_outcome_advantage`` with ``global_stat_est``).

    Per step every prompt of the batch starts active. Round t (t = 0..max_rounds-1) samples
    ``round_repeat`` (M) responses for every active prompt in ONE engine call (seed offset t);
    each sample goes to the prompt's positive cache (reward > ``positive_threshold``) or
    negative cache, in generation order. After the round a prompt exits when
    - balanced: #pos >= n//2 and #neg >= n - n//2;
    - positive_focused: #pos >= 1;
    and is downsampled to n = ``final_keep`` (``seq_keep_counts``). Prompts still active after
    ``max_rounds`` fall back to what they have (``seq_keep_counts(finished=False)``).

    The returned group per prompt (uid = problem uid) holds the kept samples, positives first
    then negatives (each in generation order), with their real rewards. Every other generated
    sample is moved to meter purpose ``"discarded"``.

    Advantages with global statistics (``global_stat_est``, default): mean/std come from ALL
    the prompt's generated samples as 0/1 (``global_stats``), not from the kept ones, so the
    trainer's per-group estimator cannot reproduce them. They are put in
    ``Group.meta["advantages"]`` (one float per kept sample, in order):
    A_i = (r_i - mean) / (std + eps) if ``norm_adv_by_std`` else r_i - mean (verl adds eps to
    the already clamped std). ``sample_advantages`` hands them to the trainer, which uses them
    instead of its own estimator. With ``global_stat_est=False`` no advantages are set and the trainer's
    estimator runs on the kept samples (verl's local statistics).

    The paper's extra 1/p_hat factor is not applied (the released code does not).

    Budget: the number generated varies (M*B in round 0, at most max_rounds*M*B);
    ``rollouts_per_step(B)`` is the minimum (round 0 only) and ``last_stats["rollouts"]`` is
    what the last step generated (as DAPO). Stateless across steps.
    """
    name = "reinforce_ada_seq"
    Config = ReinforceAdaSeqConfig

    def _exits(self, n_pos: int, n_neg: int) -> bool:
        c, n = self.config, self.config.final_keep
        if c.choice == "balanced":
            return n_pos >= n // 2 and n_neg >= n - n // 2
        return n_pos >= 1

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        c = self.config
        items = ctx.prompt_items(batch)
        merged: list[Group | None] = [None] * len(batch)
        pos: list[list[int]] = [[] for _ in batch]      # indices into merged[i]'s samples
        neg: list[list[int]] = [[] for _ in batch]
        finished = [False] * len(batch)
        rounds_of = [0] * len(batch)
        active = list(range(len(batch)))
        rounds = rollouts = 0
        for t in range(c.max_rounds):
            if not active:
                break
            groups = ctx.sample_groups([items[i] for i in active], c.round_repeat, seed_offset=t)
            rounds += 1
            for i, g in zip(active, groups):
                rollouts += g.n
                rounds_of[i] = t + 1
                m = merged[i]
                if m is None:
                    g.meta["round_of_sample"] = [t] * g.n
                    merged[i] = m = g
                    start = 0
                else:
                    start = m.n
                    m.add_round(g, t)
                for j in range(start, m.n):
                    (pos[i] if m.rewards[j] > c.positive_threshold else neg[i]).append(j)
                if self._exits(len(pos[i]), len(neg[i])):
                    finished[i] = True
            active = [i for i in active if not finished[i]]

        out: list[Group] = []
        keep_idx: list[list[int]] = []
        all_groups: list[Group] = []
        for i, m in enumerate(merged):
            if m is None:
                continue
            kp, kn = seq_keep_counts(len(pos[i]), len(neg[i]), c.final_keep, c.choice, finished[i])
            idx = pos[i][:kp] + neg[i][:kn]
            all_groups.append(m)
            keep_idx.append(idx)
            if not idx:          # nothing to train on (cannot happen with M >= 1)
                continue
            n_pos, n_neg = len(pos[i]), len(neg[i])
            g = m.subset(idx, {"rounds": rounds_of[i], "finished": finished[i], "generated": m.n,
                               "total_pos": n_pos, "total_neg": n_neg, "p_hat": n_pos / max(m.n, 1),
                               "kept_idx": idx, "round_of_sample": [m.meta["round_of_sample"][j] for j in idx],
                               "generated_mean_reward": float(np.mean(m.rewards))})
            if c.global_stat_est:
                mean, std = global_stats(n_pos, n_neg, c.eps)
                adv = [(r - mean) / (std + c.eps) if c.norm_adv_by_std else r - mean for r in g.rewards]
                g.meta.update(global_mean=mean, global_std=std, advantages=adv)
            out.append(g)
        discard(ctx, all_groups, keep_idx)
        self.last_stats = {"gen_rounds": float(rounds), "rollouts": float(rollouts),
                           "finished_prompts": float(sum(finished)),
                           "fallback_prompts": float(sum(1 for i, m in enumerate(merged)
                                                         if m is not None and not finished[i])),
                           "kept": float(sum(g.n for g in out))}
        return out

    def rollouts_per_step(self, batch_size: int) -> int:
        """Rollouts of round 0 (the minimum a step generates; the maximum is max_rounds times it)."""
        return batch_size * self.config.round_repeat

    def sample_advantages(self, group: Group) -> list[float] | None:
        """The global-statistics advantages (``global_stat_est``); None: the trainer's estimator."""
        return group.meta.get("advantages")
