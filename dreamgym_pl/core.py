"""Core data types shared by environments, agents, the collector and the trainers.

Everything that crosses a module boundary is one of these dataclasses, and every one of them
round-trips through JSON so that offline data, replay buffers and run artifacts are plain JSONL.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Type, TypeVar

T = TypeVar("T")


@dataclass
class Task:
    """One goal for an agent: an id, the instruction shown to the agent and env-private goal data."""

    task_id: str
    instruction: str
    goal: dict[str, Any] = field(default_factory=dict)
    parent_id: str | None = None  # set for curriculum-generated variations
    generation: int = 0


@dataclass
class Observation:
    """What the agent sees: the state text and, where the env knows them, the admissible actions."""

    text: str
    admissible: list[str] = field(default_factory=list)
    refs: dict[str, str] = field(default_factory=dict)  # env-side ids behind page handles (not shown to agents' LLMs)


@dataclass
class StepResult:
    observation: Observation
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Transition:
    """(task, s_t, a_t, s_{t+1}, r_{t+1}, done) plus provenance; the unit of offline data and replay."""

    task: Task
    step: int
    state: Observation
    action: str
    next_state: Observation
    reward: float
    done: bool
    source: str = "real"  # agent / origin tag: oracle, random, noisy_oracle, policy, synthetic, ...
    reasoning: str = ""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory:
    task: Task
    transitions: list[Transition] = field(default_factory=list)
    source: str = "real"

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.transitions))

    @property
    def final_reward(self) -> float:
        return float(self.transitions[-1].reward) if self.transitions else 0.0

    @property
    def success(self) -> bool:
        return bool(self.transitions) and bool(self.transitions[-1].info.get("success", False))


class DataError(ValueError):
    """A malformed data file; the message names the file and line."""


_FIELDS: dict[type, tuple[str, ...]] = {}


def _plain(obj: Any) -> Any:
    """`dataclasses.asdict`'s conversion without its deep copy of str / number leaves (a third of a checkpoint's
    time went to copying immutable strings); other leaves are still deep-copied."""
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    cls = type(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = _FIELDS.get(cls)
        if names is None:
            names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(obj))
        return {n: _plain(getattr(obj, n)) for n in names}
    if cls is list:
        return [_plain(x) for x in obj]
    if cls is dict:
        return {_plain(k): _plain(v) for k, v in obj.items()}
    if cls is tuple:
        return tuple(_plain(x) for x in obj)
    return copy.deepcopy(obj)


def to_dict(obj: Any) -> dict[str, Any]:
    """A dataclass as plain dicts and lists: equal to `dataclasses.asdict(obj)` for fields of plain types (str,
    numbers, None, list, dict, tuple, dataclasses: tests/test_core.py); other leaves are deep-copied as it does."""
    return _plain(obj)


def _build(cls: Type[T], data: dict[str, Any]) -> T:
    if cls is Transition:
        d = dict(data)
        d["task"] = Task(**d["task"])
        d["state"] = Observation(**d["state"])
        d["next_state"] = Observation(**d["next_state"])
        return Transition(**d)  # type: ignore[return-value]
    if cls is Trajectory:
        d = dict(data)
        d["task"] = Task(**d["task"])
        d["transitions"] = [_build(Transition, t) for t in d.get("transitions", [])]
        return Trajectory(**d)  # type: ignore[return-value]
    return cls(**data)


def from_dict(cls: Type[T], data: dict[str, Any]) -> T:
    return _build(cls, data)


def write_jsonl(path: str | os.PathLike, items: Iterable[Any], append: bool = False) -> int:
    """Write dataclasses (or dicts) one JSON object a line. Without `append` the write is atomic."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    if append:
        with open(path, "a", encoding="utf-8") as f:
            for it in items:
                f.write(json.dumps(it if isinstance(it, dict) else to_dict(it)) + "\n")
                n += 1
        return n
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it if isinstance(it, dict) else to_dict(it)) + "\n")
            n += 1
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return n


def iter_jsonl(path: str | os.PathLike, cls: Type[T] | None = None) -> Iterator[Any]:
    """Yield parsed lines; a malformed line raises DataError naming the file and line number."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                yield data if cls is None else from_dict(cls, data)
            except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as e:
                raise DataError(f"{path}:{lineno}: malformed {getattr(cls, '__name__', 'JSON')} line ({e})") from e


def read_jsonl(path: str | os.PathLike, cls: Type[T] | None = None) -> list[Any]:
    return list(iter_jsonl(path, cls))


def group_trajectories(transitions: Iterable[Transition]) -> list[Trajectory]:
    """Rebuild trajectories from a flat transition list (consecutive steps of one episode id)."""
    trajs: list[Trajectory] = []
    cur: Trajectory | None = None
    for t in transitions:
        ep = t.info.get("episode")
        if cur is None or t.step == 0 or (ep is not None and cur.transitions and cur.transitions[-1].info.get("episode") != ep):
            cur = Trajectory(task=t.task, source=t.source)
            trajs.append(cur)
        cur.transitions.append(t)
    return trajs
