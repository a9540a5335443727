"""Counting a real environment's interactions where they happen: `EnvMeter` wraps an env and counts the
episodes it opens (reset slots and initial observations) and the transitions it steps; `StoredStarts` serves
each task's first observation from a store, fetching it from the real env (one counted reset) only the first
time, and travels with RL checkpoints so that a resumed stage neither refetches nor miscounts."""

from __future__ import annotations

from typing import Any, Sequence

from dreamgym_pl.core import Observation, Task


class EnvMeter:
    """`env` with counters: `resets` (episode slots opened by `reset`, plus `initial_observation` calls) and
    `transitions` (step results). Everything else is the env's own."""

    def __init__(self, env: Any):
        self._env = env
        self.resets = 0
        self.transitions = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def reset(self, tasks: Sequence[Task]) -> list[Observation]:
        self.resets += len(tasks)
        return self._env.reset(tasks)

    def step(self, actions: Sequence[str | None]) -> list[Any]:
        out = self._env.step(actions)
        self.transitions += sum(r is not None for r in out)
        return out

    def initial_observation(self, task: Task) -> Observation:
        self.resets += 1
        return self._env.initial_observation(task)


class StoredStarts:
    """First observations by start task id: fetched once through `meter` (a counted real reset), then stored.
    `start(task)` maps a task to the task whose real start it shares (a generated task starts where its parent
    does); `fetched` counts real fetches over the stage, restored with `load`."""

    def __init__(self, meter: EnvMeter, start: Any = None):
        self.meter = meter
        self.start = start or (lambda task: task)
        self.store: dict[str, Observation] = {}
        self.fetched = 0

    def __call__(self, task: Task) -> Observation:
        t = self.start(task)
        if t.task_id not in self.store:
            self.store[t.task_id] = self.meter.initial_observation(t)
            self.fetched += 1
        obs = self.store[t.task_id]
        return Observation(obs.text, list(obs.admissible), dict(obs.refs))

    def state_dict(self) -> dict[str, Any]:
        return {"fetched": self.fetched,
                "store": {k: {"text": o.text, "admissible": list(o.admissible), "refs": dict(o.refs)}
                          for k, o in self.store.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.fetched = int(state["fetched"])
        self.store = {k: Observation(v["text"], list(v["admissible"]), dict(v["refs"])) for k, v in state["store"].items()}
