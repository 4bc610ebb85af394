"""GiGPO advantages on episodes (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM
Agent Training", arXiv 2505.10978; docs/methods.md §11).

A pure function of finished episodes: no tensors, no tokens. Each episode carries its episode
group (episodes started from the same initial state, e.g. the same map seed), the anchor
observation of every step (the state the action was taken in, see ``components.envs.base``)
and the reward of every step. Per step t of episode i:

* Episode level: R_i = sum of the episode's step rewards (verl-agent's ``EpisodeRewardManager``
  scores every step row with the episode reward); A^E_i = R_i - mean, or (R_i - mean) / (std +
  eps) in ``mean_std_norm``. ``episode_stats="steps"`` (default, verl-agent's
  ``compute_mean_std_cross_all_data=True``): mean and std over all step rows of the group, so an
  episode counts once per step it took; ``"episodes"``: over the group's episodes, once each (the
  paper's equation). A group with a single row gets mean 0, std 1 (verl-agent).
* Step level: steps of one episode group whose anchors are equal (hashable equality, verl-agent
  ``build_step_group``; revisits of a state within one episode join the same step group) form a
  step group. The discounted return G_t = sum_k gamma^k r_{t+k} (``compute_step_discounted_
  returns``, gamma = 0.95 in verl-agent's Sokoban script); A^S = G_t - mean over the step group,
  or divided by (std + eps) in ``mean_std_norm``; a singleton step group gets A^S = 0.
* A = A^E + omega * A^S (``step_advantage_w``, 1.0).

std is the unbiased sample std (``torch.std`` in verl-agent), eps = 1e-6. Arithmetic is float64
(exact sums), a deliberate difference: a one-off comparison with a transcription of verl-agent's
``core_gigpo`` on 300 random episode batches agreed to 5e-6 in ``mean_norm`` and, with integer
rewards, in ``mean_std_norm``; with Sokoban's 0.1-valued rewards verl-agent's float32 returns of
equal-valued groups differ by ~1e-7, which its eps = 1e-6 turns into O(1) advantages, where this
function gives ~0.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Hashable, Sequence

__all__ = ["Episode", "GiGPOAdvantages", "gigpo_advantages", "discounted_returns", "MODES"]

MODES = ("mean_norm", "mean_std_norm")


@dataclass(frozen=True)
class Episode:
    group: Hashable
    anchors: Sequence[Hashable]
    rewards: Sequence[float]


@dataclass(frozen=True)
class GiGPOAdvantages:
    """Per episode, per step: the combined advantage and its two parts."""
    advantages: list[list[float]]
    episode: list[list[float]]
    step: list[list[float]]
    step_group_sizes: list[list[int]]


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def _mean_std(xs: list[float]) -> tuple[float, float]:
    m = math.fsum(xs) / len(xs)
    if len(xs) < 2:
        return m, 1.0
    return m, math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _normalise(x: float, mean: float, std: float, mode: str, eps: float) -> float:
    return x - mean if mode == "mean_norm" else (x - mean) / (std + eps)


def gigpo_advantages(episodes: Sequence[Episode], gamma: float = 0.95, step_weight: float = 1.0,
                     mode: str = "mean_norm", episode_stats: str = "steps",
                     eps: float = 1e-6) -> GiGPOAdvantages:
    if mode not in MODES:
        raise ValueError(f"gigpo: mode must be one of {MODES}, got {mode!r}")
    if episode_stats not in ("steps", "episodes"):
        raise ValueError(f"gigpo: episode_stats must be 'steps' or 'episodes', got {episode_stats!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gigpo: gamma must be in [0, 1], got {gamma}")
    if not episodes:
        raise ValueError("gigpo: no episodes")
    for i, ep in enumerate(episodes):
        if len(ep.anchors) != len(ep.rewards):
            raise ValueError(f"gigpo: episode {i} has {len(ep.anchors)} anchors but "
                             f"{len(ep.rewards)} rewards")
        if not ep.rewards:
            raise ValueError(f"gigpo: episode {i} has no steps")
        for t, r in enumerate(ep.rewards):
            if not math.isfinite(float(r)):
                raise ValueError(f"gigpo: episode {i} step {t} reward is {r}")

    # episode level
    totals = [math.fsum(float(r) for r in ep.rewards) for ep in episodes]
    by_group: dict = defaultdict(list)
    for ep, total in zip(episodes, totals):
        rows = len(ep.rewards) if episode_stats == "steps" else 1
        by_group[ep.group].extend([total] * rows)
    group_stats = {g: (0.0, 1.0) if len(xs) == 1 else _mean_std(xs) for g, xs in by_group.items()}
    ep_adv = [[_normalise(total, *group_stats[ep.group], mode, eps)] * len(ep.rewards)
              for ep, total in zip(episodes, totals)]

    # step level: anchor groups within each episode group
    returns = [discounted_returns(ep.rewards, gamma) for ep in episodes]
    step_groups: dict = defaultdict(list)
    for i, ep in enumerate(episodes):
        for t, anchor in enumerate(ep.anchors):
            try:
                key = (ep.group, anchor)
                hash(key)
            except TypeError:
                raise TypeError(f"gigpo: episode {i} step {t} anchor is not hashable "
                                f"({type(anchor).__name__})") from None
            step_groups[key].append((i, t))
    step_adv = [[0.0] * len(ep.rewards) for ep in episodes]
    sizes = [[0] * len(ep.rewards) for ep in episodes]
    for members in step_groups.values():
        xs = [returns[i][t] for i, t in members]
        m, s = _mean_std(xs)
        for i, t in members:
            sizes[i][t] = len(members)
            step_adv[i][t] = 0.0 if len(members) == 1 else _normalise(returns[i][t], m, s, mode, eps)

    total_adv = [[e + step_weight * a for e, a in zip(ea, sa)] for ea, sa in zip(ep_adv, step_adv)]
    return GiGPOAdvantages(total_adv, ep_adv, step_adv, sizes)
