"""The online loop: real transitions of the RL stages go into the replay buffer, and (optionally) the experience
model is refreshed on the policy's own real behaviour during synthetic RL (the paper's co-evolution).

- `OnlineReplay` (rl, s2r): after every iteration's rollouts, the iteration's real transitions (of all ranks)
  join the buffer as `online` entries, annotated with the env's reasoning traces.
- `ExperienceRefresh` (synthetic_rl, `experience.refresh_every` > 0): before the rollouts of every N-th iteration,
  `collect(iteration)` plays the current policy in the real env for a few episodes, their transitions join the
  buffer, and `learn(trajectories, iteration)` fine-tunes the experience model on them (`finetune`), whose
  next generations then come from the new weights. Its counters travel with RL checkpoints.

Everything is a fixed function of (seed, iteration), so that a stage resumed after a kill redoes a refresh
identically. This module knows no stage and no Run: the stages hand it their pieces.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Sequence

import lightning as L

from dreamgym_pl import dist
from dreamgym_pl.core import Task, Trajectory, Transition
from dreamgym_pl.experience.annotate import annotate

REFRESH_STREAM = 611953  # a prime distinct from the RL iteration streams (rollout.datamodule)
POLICY_INFO = ("prompt", "response_ids", "gen_logprobs")  # the policy's generation record: not replay data


def refresh_due(iteration: int, every: int) -> bool:
    """Whether the experience model is refreshed before the rollouts of `iteration`: every `every` iterations
    after the first (the policy has moved), never with `every` <= 0."""
    return every > 0 and iteration > 0 and iteration % every == 0


def refresh_rng(seed: int, iteration: int) -> random.Random:
    """The refresh's random stream at `iteration` (task choice, torch seed, batch order)."""
    return random.Random(seed * REFRESH_STREAM + iteration)


def refresh_tasks(pool: Sequence[Task], episodes: int, seed: int, iteration: int) -> list[Task]:
    """`episodes` tasks drawn with replacement from `pool`, a fixed function of (seed, iteration)."""
    if not pool or episodes <= 0:
        return []
    rng = refresh_rng(seed, iteration)
    return [pool[rng.randrange(len(pool))] for _ in range(episodes)]


def replay_copies(trajs: Sequence[Trajectory], tag: str) -> list[Trajectory]:
    """Copies of `trajs` fit for the replay buffer and the experience model: the policy's generation record
    dropped from each transition's info and `info["episode"] = f"{tag}-{i}"` (exclude=episode retrieval). The
    originals (the RL stage's training data) are left as they are."""
    out = []
    for i, t in enumerate(trajs):
        steps = [dataclasses.replace(s, info={**{k: v for k, v in s.info.items() if k not in POLICY_INFO},
                                              "episode": f"{tag}-{i}"}) for s in t.transitions]
        out.append(Trajectory(task=t.task, transitions=steps, source=t.source))
    return out


def add_online(buffer: Any, trajs: Sequence[Trajectory], explain: Callable[[Transition], str],
               tag: str) -> tuple[list[Trajectory], int]:
    """Every rank's `trajs` (rank order), copied for replay (`replay_copies`), annotated with `explain`, and added
    to `buffer` as `online` entries on every rank (all ranks hold the same buffer). Returns (the annotated
    copies of all ranks, how many entries were new)."""
    parts = dist.all_gather_objects(list(trajs))
    every = replay_copies([t for part in parts for t in part], tag)
    annotate(every, explain)
    added = buffer.add([s for t in every for s in t.transitions], source="online")
    return every, added


def finetune(model: Any, tokenizer: Any, trajs: Sequence[Trajectory], fmt: Any, buffer: Any, steps: int, lr: float,
             batch_size: int, seed: int, grad_clip: float | None = None, terminal_repeat: int = 1,
             micro_batches: int = 1, precision: Any = "32-true") -> list[float]:
    """Fine-tune the experience model in place for `steps` AdamW steps on the experience stage's samples of
    `trajs` (its prompts with retrieved demonstrations, its targets with reasoning, its loss: `ExperienceModule`),
    batches shuffled with `seed`, cycling over them as needed. Returns the training loss of every step. The
    model's train/eval mode is left as it was."""
    from dreamgym_pl.experience.module import experience_samples
    from dreamgym_pl.experience.train_steps import adamw_steps, shuffled_batches

    samples = experience_samples(trajs, tokenizer, fmt, buffer, terminal_repeat)
    if not samples or steps <= 0:
        return []
    batches = shuffled_batches(lambda: samples, batch_size, tokenizer.pad_token_id, seed)
    return adamw_steps(model, batches, steps, lr, 0, grad_clip, "a refresh", micro_batches=micro_batches,
                       precision=precision)


class OnlineReplay(L.Callback):
    """rl / s2r: the real transitions of every iteration's rollouts join `buffer` (`add_online`); `added` counts
    the new entries over the stage (restored on resume through `state_dict`)."""

    def __init__(self, buffer: Any, explain: Callable[[Transition], str], stage: str):
        self.buffer, self.explain, self.stage = buffer, explain, stage
        self.added = 0

    def on_rollouts_end(self, trainer: L.Trainer, pl_module: L.LightningModule, dm: Any, trajs: list,
                        logs: dict) -> None:
        _, n = add_online(self.buffer, trajs, self.explain, f"{self.stage}-{dm.iteration}")
        self.added += n
        logs["replay/online_added"] = float(n)

    def state_dict(self) -> dict[str, Any]:
        return {"added": self.added}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.added = int(state["added"])


class ExperienceRefresh(L.Callback):
    """synthetic_rl: before the rollouts of every `every`-th iteration (`refresh_due`), `collect(iteration)` gives
    the current policy's real trajectories (their real steps counted by the caller's EnvMeter), which join
    `buffer` (`add_online`), and `learn(trajectories, iteration)` fine-tunes the experience model on them,
    returning the step losses. The iteration's logs get experience_refresh/{steps, real_transitions, episodes,
    loss_first, loss_last}; `totals` (restored on resume) count over the stage. A refresh is done before the
    rollouts, so a checkpoint taken after them holds the refreshed model."""

    def __init__(self, every: int, buffer: Any, explain: Callable[[Transition], str],
                 collect: Callable[[int], list[Trajectory]], learn: Callable[[list[Trajectory], int], list[float]]):
        self.every, self.buffer, self.explain, self.collect, self.learn = every, buffer, explain, collect, learn
        self.totals: dict[str, float] = {"refreshes": 0, "steps": 0, "transitions": 0, "episodes": 0,
                                         "loss_first": float("nan"), "loss_last": float("nan")}  # losses: the latest
        self.logs: dict[str, float] = {}

    def on_rollout_iteration_start(self, trainer: L.Trainer, pl_module: L.LightningModule, dm: Any) -> None:
        it = dm.iteration
        if not refresh_due(it, self.every):
            return
        trajs, added = add_online(self.buffer, self.collect(it), self.explain, f"refresh-{it}")
        losses = self.learn(trajs, it)
        n = sum(len(t.transitions) for t in trajs)
        t = self.totals
        t.update(refreshes=t["refreshes"] + 1, steps=t["steps"] + len(losses), transitions=t["transitions"] + n,
                 episodes=t["episodes"] + len(trajs))
        self.logs = {"experience_refresh/steps": float(len(losses)), "experience_refresh/real_transitions": float(n),
                     "experience_refresh/episodes": float(len(trajs)), "experience_refresh/replay_added": float(added),
                     "experience_refresh/success_rate": sum(x.success for x in trajs) / max(1, len(trajs))}
        if losses:
            t.update(loss_first=losses[0], loss_last=losses[-1])
            self.logs.update({"experience_refresh/loss_first": losses[0], "experience_refresh/loss_last": losses[-1]})

    def on_rollouts_end(self, trainer: L.Trainer, pl_module: L.LightningModule, dm: Any, trajs: list,
                        logs: dict) -> None:
        logs.update(self.logs)
        self.logs = {}

    def state_dict(self) -> dict[str, Any]:
        return {k: (None if v != v else v) for k, v in self.totals.items()}  # NaN (no loss yet) as null in JSON

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.totals = {k: (float("nan") if state.get(k) is None else type(v)(state[k])) for k, v in self.totals.items()}

    def metrics(self) -> dict[str, float]:
        """The stage's totals as experience_refresh/{refreshes, steps, episodes, transitions} and the latest
        refresh's loss_first / loss_last (when a refresh trained). `transitions` are real ones, counted in the
        stage's real_transitions already (the name keeps them out of budget/real_transitions)."""
        return {f"experience_refresh/{k}": float(v) for k, v in self.totals.items() if v == v}
