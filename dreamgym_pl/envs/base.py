"""The environment contract, the batching helpers and the registry.

Every environment the pipeline runs is an `Environment`: shared code (collector, prompts, tokenizer,
experience model, synthetic env, stages) asks the environment and knows nothing else about it. A new
environment is one module (a subclass of `Environment`, usually through `SerialVecEnv`, registered with
`@register("name")`) plus one `conf/env/<name>.yaml`.

Batched episodes: `reset(tasks)` opens one slot per task; `step(actions)` takes one action per slot (None for
a slot whose episode ended) and returns one StepResult per slot (None where the action was None). Real and
synthetic environments are interchangeable to the collector: that is the point of the design.
"""

from __future__ import annotations

import importlib
import re
from abc import ABC, abstractmethod
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from dreamgym_pl.core import Observation, StepResult, Task, Transition

SCRIPTED_AGENTS = ("oracle", "noisy_oracle", "random")


@runtime_checkable
class VecEnv(Protocol):
    """What the collector needs (real envs and the synthetic env alike)."""

    max_steps: int

    def tasks(self, split: str) -> list[Task]: ...

    def reset(self, tasks: Sequence[Task]) -> list[Observation]: ...

    def step(self, actions: Sequence[str | None]) -> list[StepResult | None]: ...


def canonical_action(action: str) -> str:
    """`click [ next > ]` -> `click[next >]`: bracketed `verb[argument]` actions with the word tokenizer's spacing
    undone; any other text with its whitespace collapsed."""
    m = re.match(r"^\s*(\w+)\s*\[(.*)\]\s*$", action, re.DOTALL)
    if not m:
        return " ".join(action.split())
    return f"{m.group(1).lower()}[{' '.join(m.group(2).split())}]"


def action_key(action: str) -> str:
    """Spacing- and case-insensitive key for comparing an action with an admissible one."""
    return "".join(action.lower().split())


class Environment(ABC):
    """The contract. Abstract methods must be implemented (instantiating an env without one fails, naming it);
    the others have defaults that fit most text environments and may be overridden.

    Class attributes an env sets:
      max_steps     steps before an episode is cut
      instructions  the agent's system instruction, shown when `prompt.think` asks an LLM to reason
      action_stop   strings that end an action in a policy's generation (the text is cut after the first)
      atomic_words  words the tiny word tokenizer keeps as one token (page separators and the like)
    """

    max_steps: int = 15
    instructions: str = "You are an agent acting in an environment."
    action_stop: tuple[str, ...] = ("]",)
    atomic_words: tuple[str, ...] = ()

    # ----- batched episodes -----------------------------------------------------------------------
    @abstractmethod
    def tasks(self, split: str) -> list[Task]:
        """The fixed tasks of a split: train (offline data, RL, curriculum seeds), val (every choice: sweeps,
        defaults, early stopping) or test (reported only). The three are disjoint and fixed by the env's config;
        an unknown split is a KeyError/ValueError naming the known ones."""

    @abstractmethod
    def reset(self, tasks: Sequence[Task]) -> list[Observation]:
        """Open one episode per task; their first observations."""

    @abstractmethod
    def step(self, actions: Sequence[str | None]) -> list[StepResult | None]:
        """One action per slot (None: ended slot); one result per slot (None where the action was None)."""

    # ----- what the method needs from the environment ---------------------------------------------
    @abstractmethod
    def scripted_agent(self, name: str, seed: int = 0, eps: float = 0.3) -> Any:
        """A batched actor for offline data and reference evaluations: oracle, noisy_oracle (a random action
        with probability eps), random, or an agent of the env's own declared with `register(..., scripted_agents=)`."""

    @abstractmethod
    def explain(self, t: Transition) -> str:
        """The ground-truth reasoning trace of a real transition (why the action led to this state and
        reward): the experience model's reasoning target (paper Eq. 5)."""

    @abstractmethod
    def corpus(self) -> list[str]:
        """Text the tiny word tokenizer must cover besides the tasks and the offline data (page elements,
        action words, the reasoning templates): an <unk> is dropped on decode and breaks parsing."""

    # ----- defaults --------------------------------------------------------------------------------
    def normalize_action(self, text: str) -> str:
        """The action as the env and the histories see it, from the policy's detokenised text."""
        return canonical_action(text)

    def is_admissible(self, action: str, obs: Observation) -> bool:
        """Whether `obs` offers `action` (the synthetic env's rule for invalid actions). An observation that
        lists no admissible actions admits everything."""
        if not obs.admissible:
            return True
        key = action_key(action)
        return any(action_key(a) == key for a in obs.admissible)

    def invalid_observation(self, obs: Observation, action: str) -> Observation:
        """What the agent sees after an action that `obs` does not offer, where the env keeps the episode going
        (the synthetic env's `stay` rule copies the real env's): by default `obs` unchanged."""
        return obs

    def ending_check(self, task: Task, history: Sequence[tuple[str, str]]) -> str | None:
        """Why an episode ending on `history` ((observation text, action) pairs, the ending action last) cannot be
        a success, decided by the task and what the agent saw and did, not by the env's hidden state (WebShop: a
        purchase without an option the instruction asks for, or above its price bound); None when nothing rules
        it out. A necessary condition only: it must never rule out an ending the real env pays as a success.
        With `experience.ending_rules` the synthetic env pays such an ending as a failure whatever the outcome
        model says. By default None (nothing is ruled out)."""
        return None

    def initial_observation(self, task: Task) -> Observation:
        """The first observation of a task, a fixed function of it (no transition is consumed)."""
        return self.reset([task])[0]

    def task_family(self, task: Task) -> str:
        """The finest grouping whose tasks are variations of one another: what a variation keeps (WebShop: the
        product type; TextWorld: the kind of quest), the rest (attributes, options, objects) free. The task
        generator trains on (seed, another task of its family) pairs (`curriculum.variation_pairs`). By
        default the goal's `category`; a curriculum-generated task has its root parent's family."""
        return str(root_goal(task.goal).get("category", ""))

    def check_generated_task(self, instruction: str, seed: Task) -> str | None:
        """Why a generated (detokenised) instruction is not a well-formed variation of `seed` in this env
        (e.g. another product type, an unreadable price, an object its game lacks), or None when it is. The
        default accepts every instruction."""
        return None


def root_goal(goal: dict[str, Any]) -> dict[str, Any]:
    """The real goal under a curriculum-generated task's (`{"generated": True, "parent_goal": ...}`, nested once
    per generation): where the task is played from, and what its family is."""
    while goal.get("generated") and isinstance(goal.get("parent_goal"), dict):
        goal = goal["parent_goal"]
    return goal


CONTRACT = ("tasks", "reset", "step", "scripted_agent", "explain", "corpus", "normalize_action", "is_admissible",
            "invalid_observation", "initial_observation", "task_family", "check_generated_task", "max_steps",
            "instructions", "action_stop", "atomic_words")


def check_contract(env: Any, name: str) -> None:
    """Fail naming every missing part of the contract (for envs that do not subclass `Environment`)."""
    missing = [m for m in CONTRACT if not hasattr(env, m)]
    if missing:
        raise TypeError(f"env.name: environment {name!r} ({type(env).__name__}) misses {missing} of the environment "
                        f"contract (dreamgym_pl/envs/base.py: Environment)")


class SingleEnv(Protocol):
    def reset(self, task: Task) -> Observation: ...

    def step(self, action: str) -> StepResult: ...


class SerialVecEnv(Environment, ABC):
    """Batches single-episode environments made by `make_env()`; they are created lazily and reused. A
    subclass adds the rest of the contract."""

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
    """The tasks of `split` for envs with fixed train/val/test splits (a clear error naming the config key)."""
    if split not in splits:
        raise KeyError(f"eval.split: {env_name} has splits {sorted(splits)}, not {split!r}")
    return splits[split]


def val_tail(train: list[Task], num_val: int | None = None) -> tuple[list[Task], list[Task]]:
    """(train, val) where val = the last `num_val` (default: a tenth, at least 1) of an ordered train list,
    for envs with no held-out split of their own left for validation; train must keep at least one task."""
    n = max(1, len(train) // 10) if num_val is None else num_val
    if not 0 < n < len(train):
        raise ValueError(f"env.num_val: {n} val tasks from the tail of {len(train)} train tasks leave none to train on")
    return train[:-n], train[-n:]


def scripted_agent_by_name(name: str, seed: int, eps: float, oracle: Callable[..., Any],
                           random_agent: Callable[[int], Any]) -> Any:
    """oracle / noisy_oracle / random for envs whose oracle class takes `oracle(eps, seed, name)`."""
    if name == "oracle":
        return oracle(0.0, seed)
    if name == "noisy_oracle":
        return oracle(eps, seed, "noisy_oracle")
    if name == "random":
        return random_agent(seed)
    raise KeyError(f"unknown scripted agent {name!r}; known: {list(SCRIPTED_AGENTS)}")


# ----- registry ------------------------------------------------------------------------------------
# Built-in environments are imported only when one of them is made (their dependencies are heavy).
BUILTIN_ENVS = {"webshop": "dreamgym_pl.envs.webshop", "textworld": "dreamgym_pl.envs.textworld",
                "alfworld": "dreamgym_pl.envs.alfworld", "miniwob": "dreamgym_pl.envs.browser",
                "webarena": "dreamgym_pl.envs.browser"}
_REGISTRY: dict[str, Callable[..., Environment]] = {}
_AGENTS: dict[str, tuple[str, ...]] = {}


def register(name: str, scripted_agents: Sequence[str] = SCRIPTED_AGENTS):
    """Decorator for an env factory `make(**env config) -> Environment`, under `env.name: <name>`;
    `scripted_agents`: the names its `scripted_agent` accepts (the common three, or more)."""

    def deco(fn):
        _REGISTRY[name] = fn
        _AGENTS[name] = tuple(scripted_agents)
        return fn

    return deco


def _ensure_loaded(name: str) -> None:
    """Import a built-in environment's module (it registers itself) the first time it is asked for."""
    if name not in _REGISTRY and name in BUILTIN_ENVS:
        importlib.import_module(BUILTIN_ENVS[name])


def env_agents(name: str) -> tuple[str, ...]:
    """The scripted agents environment `name` offers (`collect.agents`, `eval.agent` and `sft.source` are checked
    against them before work)."""
    _ensure_loaded(name)
    return _AGENTS.get(name, SCRIPTED_AGENTS)


def known_envs() -> list[str]:
    return sorted(set(_REGISTRY) | set(BUILTIN_ENVS))


def make_vec_env(name: str, **kwargs: Any) -> Environment:
    _ensure_loaded(name)
    if name not in _REGISTRY:
        raise KeyError(f"env.name: unknown environment {name!r}; known: {known_envs()}")
    env = _REGISTRY[name](**kwargs)
    check_contract(env, name)
    return env
