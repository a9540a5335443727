"""Scripted agents for offline data and reference evaluations: oracle, noisy oracle and random.

Agents are batched like the envs: `begin(tasks)` opens one slot per task and `act(obs)` returns one
action per slot (None for a slot whose episode has ended). Each environment supplies its own agents
(`Environment.scripted_agent`: the oracle reads the goal, which only the environment understands);
`make_agent` asks the environment for one. The generic `RandomAgent` picks uniformly among the
admissible actions an observation lists.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from dreamgym_pl.core import Observation, Task


class ScriptedAgent:
    """Base of the batched scripted agents: subclasses implement `act_one(slot, obs)`."""

    name = "scripted"

    def begin(self, tasks: Sequence[Task]) -> None:
        self.tasks = list(tasks)

    def act(self, observations: Sequence[Observation | None]) -> list[str | None]:
        return [None if o is None else self.act_one(i, o) for i, o in enumerate(observations)]

    def act_one(self, slot: int, obs: Observation) -> str:
        raise NotImplementedError


class RandomAgent(ScriptedAgent):
    """Uniform over the admissible actions listed by the observation ("" when it lists none)."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def act_one(self, slot: int, obs: Observation) -> str:
        return self.rng.choice(obs.admissible) if obs.admissible else ""


def make_agent(name: str, seed: int = 0, eps: float = 0.3, env: Any = None) -> Any:
    """The scripted agent `name` (oracle / noisy_oracle / random, or one the environment adds, e.g. WebShop's
    near_miss) of environment `env`: `env.scripted_agent(name, seed, eps)`; eps is the noisy oracle's
    probability of a random action. An unknown name is the environment's KeyError, which lists its agents."""
    if env is None:
        raise ValueError(f"make_agent({name!r}) needs the environment: scripted agents come from env.scripted_agent")
    return env.scripted_agent(name, seed, eps)
