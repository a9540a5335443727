"""SyntheticEnv: a VecEnv played by the experience model, with replay retrieval.

For a batch of live episodes it retrieves the top-k similar real transitions for each (task, state,
action), builds the experience prompts, runs one batched generate, parses the outputs and returns
StepResults. Episodes end on `done`, on an unparseable output (an invalid transition: failure state,
reward 0, counted in `invalid_outputs`) or at `max_steps`. An action the current state does not offer (judged
by the real env's `is_admissible` rule) follows `invalid_action`: `end` (a failure state with reward 0, the
paper's rule), `stay` (the state is kept, as the real env does) or `model` (the model predicts). Where the model
predicts that an episode ends, an outcome model (experience/outcome.py), when given, decides its reward. Fresh
synthetic transitions enrich the buffer (retrieved only with `fmt.synthetic_demos`, `replay.synthetic_demos`). The first observation of a task is the real env's initial
observation, which needs no real interaction: it is a fixed function of the task.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from dreamgym_pl.core import Observation, StepResult, Task, Transition
from dreamgym_pl.experience.format import INVALID_STATE, ExperienceFormat, build_prompt, parse_output
from dreamgym_pl.experience.outcome import Outcome, ending_verdicts
from dreamgym_pl.replay.buffer import ReplayBuffer, transition_key
from dreamgym_pl.rollout.sampling import GenerationEngine, SamplingParams


class SyntheticEnv:
    def __init__(self, engine: GenerationEngine, buffer: ReplayBuffer | None, fmt: ExperienceFormat,
                 initial_observation: Callable[[Task], Observation], task_source: Callable[[str], list[Task]],
                 is_admissible: Callable[[str, Observation], bool], params: SamplingParams, max_steps: int = 15,
                 enrich: bool = True, invalid_action: str = "end",
                 invalid_observation: Callable[[Observation, str], Observation] = lambda obs, action: obs,
                 outcome: Outcome | None = None,
                 ending_check: Callable[[Task, Sequence[tuple[str, str]]], str | None] | None = None):
        """`invalid_action`: what an action the current state does not offer does: `end` (failure state, reward
        0: the paper's rule), `stay` (`invalid_observation(state, action)`, reward 0, the episode goes on:
        the real env's rule) or `model` (no rule: the experience model predicts what follows, as for any
        action; the step is still marked invalid when the predicted list lacks the action). `outcome`: the
        reward of a predicted ending (None: the experience model's own). `ending_check(task, history)`: why a
        predicted ending on history ((state text, action) pairs, the ending action last) cannot be a success
        (the env's `ending_check`), or None; a ruled-out ending is paid as a
        failure (`judge_endings`; `stats["ending_ruled_out"]`: such endings judged a success without the rule)."""
        if invalid_action not in ("end", "stay", "model"):
            raise ValueError(f"experience.invalid_action: must be end, stay or model, got {invalid_action!r}")
        self.invalid_action, self.invalid_observation = invalid_action, invalid_observation
        self.engine = engine
        self.buffer = buffer
        self.fmt = fmt
        self.initial_observation = initial_observation
        self._task_source = task_source
        self.max_steps = max_steps
        self.is_admissible = is_admissible
        self.params = params
        self.enrich = enrich
        self.outcome = outcome
        self.ending_check = ending_check
        self.defer_enrich = False
        self.pending: list[Transition] = []
        self.own_digests: set[str] = set()  # distinct transitions this rank produced (data-parallel bookkeeping)
        self.stats = {"steps": 0, "invalid_outputs": 0, "retrieval_s": 0.0, "prompt_s": 0.0, "generate_s": 0.0,
                      "parse_s": 0.0}

    def tasks(self, split: str) -> list[Task]:
        return self._task_source(split)

    def sync_enrichment(self) -> int:
        """Data parallel: every rank adds every rank's fresh synthetic transitions (rank order), so all ranks
        hold the same replay buffer and each transition is added exactly once. Returns how many were added."""
        from dreamgym_pl import dist

        parts = dist.all_gather_objects(self.pending)
        self.pending = []
        n = 0
        for part in parts:
            if part and self.buffer is not None:
                n += self.buffer.add(part, source="synthetic")
        return n

    def _move(self, i: int, action: str, obs: Observation, info: dict[str, Any]) -> StepResult:
        """Episode i (its step already counted) goes to `obs` without generation, reward 0; done at the step limit."""
        self._done[i] = self._steps[i] >= self.max_steps
        if self._done[i]:
            info["truncated"] = True
        self._hist[i].append((self._obs[i].text, action))
        self._obs[i] = obs
        return StepResult(obs, 0.0, self._done[i], info)

    def reset(self, tasks: Sequence[Task]) -> list[Observation]:
        self._tasks = list(tasks)
        self._obs = [self.initial_observation(t) for t in self._tasks]
        self._hist: list[list[tuple[str, str]]] = [[] for _ in self._tasks]
        self._steps = [0] * len(self._tasks)
        self._done = [False] * len(self._tasks)
        return list(self._obs)

    def step(self, actions: Sequence[str | None]) -> list[StepResult | None]:
        """One step of every live episode: the invalid-action rule first (`_rule_out`), then the core for the
        rest: retrieve -> prompt -> generate -> parse; the judges (`_judge`: ending rules, outcome model) may
        change a predicted ending's reward; `_advance` moves the episodes and `_enrich` buffers the new steps."""
        out: list[StepResult | None] = [None] * len(actions)
        live = self._rule_out(actions, out)
        if not live:
            return out
        t0 = time.perf_counter()
        demos = self._retrieve(live, actions)
        t1 = time.perf_counter()
        prompts = [build_prompt(self._tasks[i].instruction, self._hist[i], demos[j], self._obs[i], actions[i], self.fmt)
                   for j, i in enumerate(live)]
        t2 = time.perf_counter()
        comps = self.engine.generate(prompts, self.params)
        t3 = time.perf_counter()
        new = self._advance(live, actions, self._judge(live, actions, [parse_output(c.text) for c in comps]), out)
        t4 = time.perf_counter()
        self._enrich(new)
        self.stats["steps"] += len(live)
        self.stats["retrieval_s"] += t1 - t0
        self.stats["prompt_s"] += t2 - t1
        self.stats["generate_s"] += t3 - t2
        self.stats["parse_s"] += t4 - t3
        return out

    def _count(self, key: str, n: int | float) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    def _rule_out(self, actions: Sequence[str | None], out: list[StepResult | None]) -> list[int]:
        """The episodes the experience model plays this step: live ones with an action. Under `invalid_action`
        end / stay, an action the state does not offer is settled here (its StepResult written into `out`)."""
        live = []
        for i, a in enumerate(actions):
            if a is None or self._done[i]:
                continue
            if self.invalid_action != "model" and not self.is_admissible(a, self._obs[i]):
                self._steps[i] += 1
                self._count("invalid_actions", 1)
                info = {"invalid": True, "synthetic": True, "success": False, "score": 0.0}
                if self.invalid_action == "end":  # the paper's rule: a failure state with reward 0
                    self._done[i] = True
                    out[i] = StepResult(Observation(INVALID_STATE, []), 0.0, True, info)
                    continue
                # the real env's rule: the state stays
                out[i] = self._move(i, a, self.invalid_observation(self._obs[i], a), info)
                continue
            live.append(i)
        return live

    def _retrieve(self, live: list[int], actions: Sequence[str | None]) -> list[list[Transition]]:
        """The k demonstrations of each live episode's (task, state, action), counted by the buffer part they come
        from (stats reads_<source>)."""
        if self.buffer is None or self.fmt.k <= 0:
            return [[] for _ in live]
        keys = [transition_key(self._tasks[i].instruction, self._obs[i].text, actions[i]) for i in live]
        exclude = [self._tasks[i].task_id for i in live] if self.fmt.exclude == "task" else None
        reads: dict[str, int] = {}
        demos = self.buffer.query(keys, self.fmt.k, real_only=not self.fmt.synthetic_demos, exclude_tasks=exclude,
                                  reads=reads, online_k=self.fmt.online_k)
        for src, n in reads.items():  # which part of the buffer the experience model is shown (replay/reads_*)
            self._count(f"reads_{src}", n)
        return demos

    def _judge(self, live: list[int], actions: Sequence[str | None], parsed: list) -> list:
        """The parsed outputs with each predicted ending's reward as the judges set it: the env's ending rules
        (`ending_check`: a ruled-out ending is a failure) and the outcome model; unchanged without either."""
        ruled_out = None
        if self.ending_check is not None:
            ruled_out = [p.valid and p.done and self.ending_check(
                self._tasks[i], [*self._hist[i], (self._obs[i].text, actions[i])]) is not None
                for i, p in zip(live, parsed)]
        if self.outcome is None and ruled_out is None:
            return parsed
        items = [(self._tasks[i].instruction, self._obs[i].text, actions[i]) for i in live]
        free, judged = ending_verdicts(parsed, items, self.outcome, ruled_out)  # without the rules, with them
        ends = [(a, b, c) for a, b, c in zip(parsed, free, judged) if a.valid and a.done]
        if self.outcome is not None:
            self._count("outcome_judged", len(ends))
            self._count("outcome_success", sum(b.reward >= 1.0 for _, b, _ in ends))
            self._count("outcome_overruled", sum((a.reward >= 1.0 - 1e-6) != (b.reward >= 1.0 - 1e-6) for a, b, _ in ends))
        if ruled_out is not None:
            self._count("endings", len(ends))
            self._count("ending_ruled_out", sum(b.reward >= 1.0 - 1e-6 and c.reward < 1.0 - 1e-6 for _, b, c in ends))
        return judged

    def _advance(self, live: list[int], actions: Sequence[str | None], parsed: list,
                 out: list[StepResult | None]) -> list[Transition]:
        """Each live episode moves to its predicted state (an unparseable output: reward 0, counted in
        invalid_outputs); done on a predicted ending or at the step limit. Returns the new synthetic transitions."""
        new: list[Transition] = []
        for i, p in zip(live, parsed):
            self._steps[i] += 1
            done = p.done or self._steps[i] >= self.max_steps
            offered = self.is_admissible(actions[i], self._obs[i])
            info: dict[str, Any] = {"invalid": not offered, "invalid_output": not p.valid, "synthetic": True,
                                    "success": bool(done and p.valid and p.reward >= 1.0 - 1e-6), "score": p.reward}
            if done and not p.done:
                info["truncated"] = True
            if not p.valid:
                self.stats["invalid_outputs"] += 1
                info["parse_errors"] = p.errors
            res = StepResult(p.observation, p.reward if p.valid else 0.0, done, info)
            if p.valid:
                new.append(Transition(task=self._tasks[i], step=self._steps[i] - 1, state=self._obs[i],
                                      action=actions[i], next_state=p.observation, reward=res.reward, done=done,
                                      source="synthetic", reasoning=p.reasoning))
            self._hist[i].append((self._obs[i].text, actions[i]))
            self._obs[i] = p.observation
            self._done[i] = done
            out[i] = res
        return new

    def _enrich(self, new: list[Transition]) -> None:
        """The new synthetic transitions join the buffer (data parallel: held for `sync_enrichment`)."""
        if not self.enrich or self.buffer is None:
            return
        if self.defer_enrich:  # data parallel: added on every rank, in rank order, by sync_enrichment
            from dreamgym_pl import dist
            from dreamgym_pl.replay.buffer import _digest

            for t in new:
                t.info["rank"] = dist.rank()
                self.own_digests.add(_digest(t))
            self.pending.extend(new)
        else:
            self.buffer.add(new, source="synthetic")
