"""Recorded episodes: play a policy in an environment, keep what replay and GiGPO need.

An :class:`EpisodeRecord` is (seed, action texts, rewards, anchors, prompts, won). The seed and
the action texts alone restore any turn prefix (``components.envs.base.replay``, how VSR
restores a replay state); anchors and rewards are GiGPO's inputs (``to_gigpo``). A record may
start from a replayed prefix: ``prefix_len`` turns were replayed as context, not generated, and
only the turns after them belong to the policy's own output.

``policy`` is any callable prompt -> reply text (a model's generate, a noisy solver, a random
choice); batching turns across episodes is the rollout engine's job, not this module's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from components.algos.gigpo import Episode

__all__ = ["EpisodeRecord", "play", "to_gigpo"]


@dataclass(frozen=True)
class EpisodeRecord:
    env_name: str
    seed: int
    actions: tuple          # every action text from reset, the replayed prefix included
    rewards: tuple          # per turn, same length as actions
    anchors: tuple          # the state each action was taken in
    prompts: tuple          # the prompt each action answered
    won: bool
    prefix_len: int = 0     # turns replayed from another episode (context, not generated)

    @property
    def generated(self) -> range:
        """Turn indices the policy generated in this episode."""
        return range(self.prefix_len, len(self.actions))


def play(make_env: Callable, seed: int, policy: Callable[[str], str],
         prefix: Sequence[str] = ()) -> EpisodeRecord:
    """Reset to ``seed``, replay ``prefix``, then let ``policy`` act until the episode ends."""
    env = make_env()
    prompt = env.reset(seed)
    actions, rewards, anchors, prompts = [], [], [], []
    done, info = False, {"won": False}
    for k in range(len(prefix) + env.max_steps):
        if done:
            break
        action = prefix[k] if k < len(prefix) else policy(prompt)
        anchors.append(env.anchor())
        prompts.append(prompt)
        prompt, reward, done, info = env.step(action)
        actions.append(action)
        rewards.append(reward)
    if len(actions) < len(prefix):
        raise ValueError(f"{env.name}: prefix of {len(prefix)} actions outlives the episode "
                         f"(seed {seed}, ended after {len(actions)})")
    if not done:
        raise RuntimeError(f"{env.name}: episode for seed {seed} did not end in max_steps")
    return EpisodeRecord(env.name, seed, tuple(actions), tuple(rewards), tuple(anchors),
                         tuple(prompts), bool(info["won"]), len(prefix))


def to_gigpo(records: Sequence[EpisodeRecord], generated_only: bool = True) -> list[Episode]:
    """GiGPO episodes grouped by (environment, seed, replayed prefix): a group shares its start.

    With ``generated_only`` the replayed prefix turns are left out (they are context, never in
    the loss), so returns and anchors cover the turns the policy produced.
    """
    out = []
    for r in records:
        start = r.prefix_len if generated_only else 0
        group = (r.env_name, r.seed, r.actions[:r.prefix_len])
        out.append(Episode(group, r.anchors[start:], r.rewards[start:]))
    return out
