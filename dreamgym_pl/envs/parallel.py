"""ProcessVecEnv: the batch slots of a VecEnv spread over worker processes, for slow real environments
(browsers) whose steps wait on I/O. Each worker owns single-episode environments made by a picklable
factory; slots are assigned round-robin; a worker that dies or hangs past `timeout_s` fails its slots'
episodes (done, counted invalid) instead of stalling the batch. Workers are closed on `close()`, at exit,
and when the parent process dies (daemon processes).

`ProcessVecEnv` implements the batched-episode part of the `Environment` contract; a subclass adds the rest
(scripted agents, explanations, corpus).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
from typing import Any, Callable, Sequence

from dreamgym_pl.core import Observation, StepResult, Task
from dreamgym_pl.envs.base import Environment


def _worker(conn: Any, make_env: Callable[[], Any]) -> None:
    envs: dict[int, Any] = {}
    try:
        while True:
            cmd, payload = conn.recv()
            if cmd == "close":
                break
            out = {}
            for slot, arg in payload.items():
                try:
                    if slot not in envs:
                        envs[slot] = make_env()
                    out[slot] = envs[slot].reset(arg) if cmd == "reset" else envs[slot].step(arg)
                except Exception as e:  # reported to the parent, which fails the episode with the message
                    out[slot] = RuntimeError(f"{type(e).__name__}: {e}")
            conn.send(out)
    finally:
        for e in envs.values():
            if hasattr(e, "close"):
                try:
                    e.close()
                except Exception:
                    pass
        conn.close()


class ProcessVecEnv(Environment):
    """Batch slots over worker processes (abstract: a subclass adds scripted_agent, explain and corpus)."""

    def __init__(self, make_env: Callable[[], Any], task_source: Callable[[str], list[Task]], max_steps: int,
                 workers: int = 2, timeout_s: float = 120.0):
        self._make_env, self._task_source = make_env, task_source
        self.max_steps, self.num_workers, self.timeout_s = max_steps, max(1, workers), timeout_s
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._done: list[bool] = []
        self._last: list[Observation] = []
        atexit.register(self.close)

    def tasks(self, split: str) -> list[Task]:
        return self._task_source(split)

    def _start(self) -> None:
        if self._procs:
            return
        ctx = mp.get_context("spawn")
        for _ in range(self.num_workers):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, self._make_env), daemon=True)
            p.start()
            self._procs.append(p)
            self._conns.append(parent)

    def _call(self, cmd: str, per_slot: dict[int, Any]) -> dict[int, Any]:
        self._start()
        by_worker: dict[int, dict[int, Any]] = {}
        for slot, arg in per_slot.items():
            by_worker.setdefault(slot % self.num_workers, {})[slot] = arg
        for w, payload in by_worker.items():
            self._conns[w].send((cmd, payload))
        out: dict[int, Any] = {}
        for w, payload in by_worker.items():
            conn = self._conns[w]
            if conn.poll(self.timeout_s * len(payload)):
                try:
                    out.update(conn.recv())
                    continue
                except EOFError:
                    pass
            self._restart(w)  # hung or dead: its slots fail, a fresh worker takes over
            out.update({s: RuntimeError(f"worker {w} did not answer within {self.timeout_s:.0f} s") for s in payload})
        return out

    def _restart(self, w: int) -> None:
        self._procs[w].kill()
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(child, self._make_env), daemon=True)
        p.start()
        self._procs[w], self._conns[w] = p, parent

    def reset(self, tasks: Sequence[Task]) -> list[Observation]:
        res = self._call("reset", dict(enumerate(tasks)))
        self._done = [False] * len(tasks)
        obs = []
        for i in range(len(tasks)):
            r = res[i]
            if isinstance(r, Exception):
                raise RuntimeError(f"reset of {tasks[i].task_id} failed: {r}")
            obs.append(r)
        self._last = obs
        return obs

    def step(self, actions: Sequence[str | None]) -> list[StepResult | None]:
        if len(actions) != len(self._done):
            raise ValueError(f"step got {len(actions)} actions for {len(self._done)} slots")
        live = {i: a for i, a in enumerate(actions) if a is not None and not self._done[i]}
        res = self._call("step", live) if live else {}
        out: list[StepResult | None] = [None] * len(actions)
        for i, r in res.items():
            if isinstance(r, Exception):
                r = StepResult(self._last[i], 0.0, True, {"invalid": True, "success": False, "error": str(r)})
            self._done[i] = r.done
            self._last[i] = r.observation
            out[i] = r
        return out

    def close(self) -> None:
        for c in self._conns:
            try:
                c.send(("close", None))
            except Exception:
                pass
        for p in self._procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        self._procs, self._conns = [], []
