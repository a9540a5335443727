"""The batched environment protocol shared by real and synthetic environments.

A VecEnv holds one slot per episode of a batch. `reset(tasks)` opens one slot per task; `step(actions)`
takes one action per slot (None for a slot whose episode already ended) and returns one StepResult per
slot (None where the action was None). Real and synthetic environments are interchangeable to the
collector: that is the point of the design.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from dreamgym_pl.core import Observation, StepResult, Task


@runtime_checkable
class VecEnv(Protocol):
    max_steps: int

    def tasks(self, split: str) -> list[Task]: ...

    def reset(self, tasks: Sequence[Task]) -> list[Observation]: ...

    def step(self, actions: Sequence[str | None]) -> list[StepResult | None]: ...


class SingleEnv(Protocol):
    def reset(self, task: Task) -> Observation: ...

    def step(self, action: str) -> StepResult: ...


class SerialVecEnv:
    """Batches single-episode environments made by `make_env()`; they are created lazily and reused."""

    def __init__(self, make_env: Callable[[], SingleEnv], task_source: Callable[[str], list[Task]], max_steps: int):
        self._make_env = make_env
        self._task_source = task_source
        self.max_steps = max_steps
        self._envs: list[SingleEnv] = []
        self._done: list[bool] = []

    def tasks(self, split: str) -> list[Task]:
        return self._task_source(split)

    def reset(self, tasks: Sequence[Task]) -> list[Observation]:
        while len(self._envs) < len(tasks):
            self._envs.append(self._make_env())
        self._done = [False] * len(tasks)
        return [env.reset(t) for env, t in zip(self._envs, tasks)]

    def step(self, actions: Sequence[str | None]) -> list[StepResult | None]:
        if len(actions) != len(self._done):
            raise ValueError(f"step got {len(actions)} actions for {len(self._done)} slots")
        out: list[StepResult | None] = []
        for i, a in enumerate(actions):
            if a is None or self._done[i]:
                out.append(None)
                continue
            r = self._envs[i].step(a)
            self._done[i] = r.done
            out.append(r)
        return out


def pick_split(splits: dict[str, list[Task]], split: str, env_name: str) -> list[Task]:
    """The tasks of `split` for envs with fixed train/test splits (a clear error naming the config key)."""
    if split not in splits:
        raise KeyError(f"eval.split: {env_name} has splits {sorted(splits)}, not {split!r}")
    return splits[split]


def scripted_agent_by_name(name: str, seed: int, eps: float, oracle: Callable[..., Any],
                           random_agent: Callable[[int], Any]) -> Any:
    """oracle / noisy_oracle / random for envs that bring their own oracle class `oracle(eps, seed, name)`."""
    if name == "oracle":
        return oracle(0.0, seed)
    if name == "noisy_oracle":
        return oracle(eps, seed, "noisy_oracle")
    if name == "random":
        return random_agent(seed)
    raise KeyError(f"unknown scripted agent {name!r} (oracle, random, noisy_oracle)")


_REGISTRY: dict[str, Callable[..., Any]] = {}


def register(name: str):
    def deco(fn):
        _REGISTRY[name] = fn
        return fn

    return deco


def make_vec_env(name: str, **kwargs: Any) -> VecEnv:
    _register_builtins()

    if name not in _REGISTRY:
        raise KeyError(f"env.name: unknown environment {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name](**kwargs)


def known_envs() -> list[str]:
    _register_builtins()
    return sorted(_REGISTRY)


def _register_builtins() -> None:
    """Import the built-in environments so that they register themselves (their heavy dependencies, such
    as the textworld package, are imported only when one is made)."""
    from dreamgym_pl.envs import browser, textworld, webshop  # noqa: F401
