"""The batched multi-turn loop: an actor and a VecEnv -> trajectories.

An actor has `begin(tasks)` and `act(observations) -> actions` (None in, None out for ended slots); after
`act` it may expose `last_info` (one dict a slot, e.g. token ids) that is stored in the transition's info.
Real and synthetic envs are interchangeable here. The number of transitions consumed is what budgets count.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from tqdm.auto import tqdm

from dreamgym_pl.core import Observation, Task, Trajectory, Transition
from dreamgym_pl.envs.base import VecEnv


class Actor(Protocol):
    def begin(self, tasks: Sequence[Task]) -> None: ...

    def act(self, observations: Sequence[Observation | None]) -> list[str | None]: ...


def run_episodes(env: VecEnv, tasks: Sequence[Task], actor: Actor, batch_size: int = 16, source: str = "real",
                 progress: bool | str = False) -> list[Trajectory]:
    """Play every task once; one actor call and one env step a turn for all live episodes of a batch (at most
    `env.max_batch` episodes at once where the env sets it: browsers are heavy)."""
    batch_size = max(1, min(batch_size, int(getattr(env, "max_batch", batch_size) or batch_size)))
    trajs: list[Trajectory] = []
    bar = tqdm(total=len(tasks), desc=progress if isinstance(progress, str) else source, disable=not progress,
               leave=False)
    for start in range(0, len(tasks), batch_size):
        batch = list(tasks[start:start + batch_size])
        obs: list[Any] = list(env.reset(batch))
        actor.begin(batch)
        cur = [Trajectory(task=t, source=source) for t in batch]
        live = [True] * len(batch)
        while any(live):
            acts = actor.act([o if l else None for o, l in zip(obs, live)])
            extra = getattr(actor, "last_info", None)
            results = env.step([a if l else None for a, l in zip(acts, live)])
            for i, r in enumerate(results):
                if r is None or not live[i]:
                    continue
                info = dict(r.info)
                if extra is not None and extra[i]:
                    info.update(extra[i])
                cur[i].transitions.append(Transition(
                    task=batch[i], step=len(cur[i].transitions), state=obs[i], action=acts[i] or "",
                    next_state=r.observation, reward=float(r.reward), done=bool(r.done), source=source, info=info))
                obs[i] = r.observation
                if r.done or len(cur[i].transitions) >= env.max_steps:  # envs cut episodes themselves; a guard
                    live[i] = False
        trajs.extend(cur)
        bar.update(len(batch))
    bar.close()
    return trajs


def episode_sums(trajs: Sequence[Trajectory]) -> list[float]:
    """[episodes, successes, score sum, invalid steps, steps]: additive, so ranks can sum them."""
    return [float(len(trajs)), float(sum(1 for t in trajs if t.success)), float(sum(t.final_reward for t in trajs)),
            float(sum(1 for t in trajs for s in t.transitions if s.info.get("invalid"))),
            float(sum(len(t.transitions) for t in trajs))]


def stats_from_sums(sums: Sequence[float]) -> dict[str, float]:
    n, succ, score, invalid, steps = sums
    return {
        "success_rate": succ / max(1.0, n),
        "mean_score": score / max(1.0, n),
        "invalid_action_rate": invalid / max(1.0, steps),
        "mean_steps": steps / max(1.0, n),
        "transitions": float(steps),
    }


def episode_stats(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Success rate, mean final score, invalid-action rate and transitions of a set of episodes."""
    return stats_from_sums(episode_sums(trajs))
