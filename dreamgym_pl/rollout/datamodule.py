"""RolloutDataModule: the RL loop's data. Every iteration it samples tasks (uniformly, or from the curriculum),
rolls the current policy out in the rollout source (the real env or the synthetic env), turns the
trajectories into training samples with the algorithm's advantages, and yields shuffled mini-batches; it
stops when its transition budget is spent, which ends the Lightning epoch and the stage.

The loop (`iterations`) reads top to bottom. Around it, Lightning callbacks attached to the Trainer receive
two RL events: `on_rollout_iteration_start(trainer, module, datamodule)` before an iteration's rollouts
(checkpoints) and `on_rollouts_end(trainer, module, datamodule, trajs, logs)` after them, before the
iteration's updates (test curves, text samples, curriculum logs; a callback may add to `logs`).
Note: Lightning fetches one batch ahead, so an iteration's rollouts start while the previous iteration's
last mini-batch is still to be trained on. Checkpoints therefore come after an iteration's last mini-batch is
trained (`RLCheckpoint.on_train_batch_end`): the weights have every update of iteration N, while this module's
counters, the replay buffer and the curriculum are already past the rollouts of N+1, whose untrained
mini-batches (`pending`) go into the checkpoint too. A resumed stage yields them first (`resume_batches`) and
then goes on: with every iteration's random streams a function of (seed, iteration), the resumed stage redoes
exactly what the killed one did after the checkpoint (the transitions it consumed are consumed again, and
counted once).
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Iterator, Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from dreamgym_pl import dist
from dreamgym_pl.core import Task, Trajectory
from dreamgym_pl.envs.base import VecEnv
from dreamgym_pl.headroom import mixed_groups
from dreamgym_pl.policy.algos.base import RLAlgorithm, trajectory_return
from dreamgym_pl.precision import fit_context
from dreamgym_pl.policy.samples import StepSample, collate, trajectory_samples
from dreamgym_pl.rollout.actor import policy_actor
from dreamgym_pl.rollout.collector import episode_sums, run_episodes, stats_from_sums
from dreamgym_pl.rollout.prompts import PromptConfig

TaskSampler = Callable[[list[Trajectory] | None], list[Task]]


def iteration_rng(seed: int, iteration: int, stream: int) -> random.Random:
    """A random stream of one RL iteration, a fixed function of (seed, iteration, stream): resumed runs replay it.
    Streams: TASK_STREAM (uniform task sampling), SHUFFLE_STREAM (sample and mini-batch order)."""
    return random.Random(seed * stream + iteration)


TASK_STREAM, SHUFFLE_STREAM, TORCH_STREAM = 100003, 7919, 104729  # distinct primes: the streams never coincide


def tasks_within_budget(remaining: int, tasks_per_iter: int, episodes_per_task: int, max_steps: int) -> int:
    """How many tasks an iteration may roll out so that its transitions cannot pass a hard budget: each task's
    episodes (`episodes_per_task`) may each take up to `max_steps` transitions. 0 when not one task fits."""
    worst = max(1, episodes_per_task * max_steps)
    return max(0, min(tasks_per_iter, remaining // worst))


def seed_iteration(seed: int, iteration: int) -> None:
    """Seed torch (policy sampling, the synthetic env's sampling) for one iteration's rollouts."""
    torch.manual_seed(iteration_rng(seed, iteration, TORCH_STREAM).randrange(2 ** 62))


class _Batches(IterableDataset):
    def __init__(self, dm: "RolloutDataModule"):
        self.dm = dm

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return self.dm.iterations()


class RolloutDataModule(L.LightningDataModule):
    """Fresh rollouts every iteration from `env` (real or synthetic), with budget accounting.

    `engine_factory(model, tokenizer)` gives the generation engine (synced to the trainer's weights);
    `task_sampler(last_trajectories)` (the curriculum) replaces uniform sampling of `tasks_per_iter` tasks;
    `action_env` is the env whose action syntax the policy uses (the real env, also for synthetic rollouts)."""

    def __init__(self, env: VecEnv, tasks: Sequence[Task], algo: RLAlgorithm, prompt_cfg: PromptConfig, budget: int,
                 tasks_per_iter: int, max_iters: int, engine_factory: Callable[[Any, Any], Any], action_env: Any,
                 seed: int = 0, source: str = "real", task_sampler: TaskSampler | None = None, rollout_batch: int = 64,
                 budget_cap: bool = False):
        super().__init__()
        self.env, self.tasks, self.algo, self.prompt_cfg = env, list(tasks), algo, prompt_cfg
        self.budget, self.tasks_per_iter, self.max_iters = budget, tasks_per_iter, max_iters
        self.engine_factory, self.action_env = engine_factory, action_env
        self.seed, self.source, self.task_sampler, self.rollout_batch = seed, source, task_sampler, rollout_batch
        # budget_cap: the budget is a hard cap: an iteration rolls out only as many tasks as fit in what is left
        # at the longest episodes (`fitting_tasks`), so the stage never passes it; else whole iterations run until
        # the budget is reached (the last one passes it)
        self.budget_cap = budget_cap
        self.consumed = 0          # transitions of all ranks
        self.episodes = 0          # episodes of all ranks (each one reset of `env`)
        self.local_consumed = 0    # this rank's
        self.rollout_s = 0.0       # wall time of collection (policy generation + env steps)
        self.iteration = 0
        self.history: list[dict[str, float]] = []
        self.rank_log: list[list[str]] = []  # task ids this rank rolled out, per iteration
        self.last: list[Trajectory] | None = None  # the latest iteration's trajectories (the curriculum learns from them)
        # mini-batches of the iteration being trained, in yield order, with their iteration (None when done), and
        # (iteration, is last) of every yielded batch not yet trained (RLCheckpoint pops them)
        self.pending: list[dict[str, torch.Tensor]] | None = None
        self.pending_iteration = -1
        self.marks: list[tuple[int, bool]] = []
        self.resume_batches: list[dict[str, torch.Tensor]] | None = None  # a checkpoint's pending batches
        self.resume_logs: dict[str, float] = {}

    # ----- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"consumed": self.consumed, "episodes": self.episodes, "iteration": self.iteration,
                "history": self.history, "rollout_s": self.rollout_s}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Counters; with a checkpoint's `pending` mini-batches (yielded first), `pending_logs` and `last`."""
        self.consumed = int(state["consumed"])
        self.episodes = int(state.get("episodes", 0))
        self.iteration = int(state["iteration"])
        self.history = list(state.get("history", []))
        self.rollout_s = float(state.get("rollout_s", 0.0))
        self.resume_batches = state.get("pending")
        self.resume_logs = dict(state.get("pending_logs") or {})
        self.last = state.get("last")

    @property
    def exhausted(self) -> bool:
        if self.budget_cap and self.fitting_tasks() < dist.world():
            return True
        return self.consumed >= self.budget or self.iteration >= self.max_iters

    def fitting_tasks(self) -> int:
        """Tasks this iteration may roll out (all ranks): tasks_per_iter, or under `budget_cap` those whose episodes
        (the group) fit in the budget left at env.max_steps each."""
        if not self.budget_cap:
            return self.tasks_per_iter
        return tasks_within_budget(self.budget - self.consumed, self.tasks_per_iter, self.algo.cfg.group_size,
                                   self.env.max_steps)

    @property
    def transitions_per_s(self) -> float:
        """Rollout throughput: transitions (all ranks) per second of collection wall time."""
        return self.consumed / self.rollout_s if self.rollout_s > 0 else 0.0

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Batches(self), batch_size=None)

    # ----- the RL loop ---------------------------------------------------------------------------
    def iterations(self) -> Iterator[dict[str, torch.Tensor]]:
        module = self.trainer.lightning_module
        engine = self.engine_factory(module.model, module.tokenizer)
        c = self.algo.cfg
        actor = policy_actor(engine, self.prompt_cfg, self.action_env, c.temperature, c.max_new_tokens, c.top_p)
        if self.resume_batches is not None:  # the checkpoint's iteration whose rollouts were made before it
            seq, self.resume_batches = self.resume_batches, None
            module.pending_logs = dict(self.resume_logs)
            yield from self._yield(seq, self.iteration - 1)
        while not self.exhausted:
            self._notify("on_rollout_iteration_start")
            seed_iteration(self.seed, self.iteration)
            rng = iteration_rng(self.seed, self.iteration, SHUFFLE_STREAM)
            tasks = self.next_tasks()
            trajs, perf = self.rollout(tasks, engine, actor)
            # an episode that an unparseable synthetic transition ended says nothing about the policy: it is
            # counted against the budget but left out of the policy loss
            learn = [t for t in trajs if not any(s.info.get("invalid_output") for s in t.transitions)]
            with fit_context(self.trainer):  # PPO's old values as its training step computes the new ones
                samples = self.algo.with_advantages(learn, self._step_samples(learn), module,
                                                    module.tokenizer.pad_token_id)
            rng.shuffle(samples)
            batches = self.minibatches(samples, module)
            logs = {**self.account(trajs), **perf, "rollout/unparseable_episodes": float(len(trajs) - len(learn))}
            self._notify("on_rollouts_end", trajs, logs)
            module.pending_logs = dict(logs)  # logged with the iteration's first training step
            self.history.append(dict(logs))
            self.iteration += 1
            self.last = trajs
            seq = []
            for _ in range(c.ppo_epochs):
                order = list(range(len(batches)))
                rng.shuffle(order)
                seq += [batches[j] for j in order]
            yield from self._yield(seq, self.iteration - 1)
        self.pending = None

    def _yield(self, seq: list[dict[str, torch.Tensor]], iteration: int) -> Iterator[dict[str, torch.Tensor]]:
        self.pending, self.pending_iteration = seq, iteration
        for i, b in enumerate(seq):
            self.marks.append((iteration, i == len(seq) - 1))
            yield b

    def next_tasks(self) -> list[Task]:
        """This rank's tasks of the iteration. The iteration's task list is the same on every rank: uniform
        sampling is seeded by the iteration; the task sampler runs on rank 0 over every rank's trajectories
        and is broadcast. Each rank rolls out its share (all G rollouts of a task stay on one rank)."""
        n = self.fitting_tasks()
        if not self.task_sampler:
            rng = iteration_rng(self.seed, self.iteration, TASK_STREAM)
            tasks = rng.sample(self.tasks, min(n, len(self.tasks)))
        elif dist.world() == 1:
            tasks = self.task_sampler(self.last)
        else:
            every = [t for part in dist.all_gather_objects(self.last) if part for t in part] if self.last is not None else None
            tasks = dist.all_gather_objects(self.task_sampler(every) if dist.is_main() else None)[0]
        if self.budget_cap:
            tasks = tasks[:n]
        mine = dist.shard(tasks)
        if not mine:
            raise ValueError(f"tasks_per_iter ({len(tasks)}) must be >= the number of ranks ({dist.world()})")
        self.rank_log.append([t.task_id for t in mine])
        return mine

    def rollout(self, tasks: Sequence[Task], engine: Any, actor: Any) -> tuple[list[Trajectory], dict[str, float]]:
        """algo.group_size episodes of every task with the current weights."""
        engine.load_weights(self.trainer.lightning_module.model)
        t0, tok0 = time.perf_counter(), engine.generated_tokens
        g = self.algo.cfg.group_size
        trajs = run_episodes(self.env, [t for t in tasks for _ in range(g)], actor,
                             batch_size=self.rollout_batch, source=self.source)
        gen_s = time.perf_counter() - t0
        self.rollout_s += gen_s
        if hasattr(engine, "sleep"):
            engine.sleep()  # colocated engines give the trainer their memory until the next rollouts
        return trajs, {"perf/gen_tokens_per_s": (engine.generated_tokens - tok0) / max(gen_s, 1e-9)}

    def _step_samples(self, trajs: Sequence[Trajectory]) -> list[list[StepSample]]:
        tok = self.trainer.lightning_module.tokenizer
        return [trajectory_samples(t, tok, self.prompt_cfg, i) for i, t in enumerate(trajs)]

    def minibatches(self, samples: list[StepSample], module: Any) -> list[dict[str, torch.Tensor]]:
        """Strided mini-batches with the rollout policy's log-probs (and the reference's). Under data
        parallelism every rank makes the same number (a rank short of samples adds a no-gradient batch)."""
        mb = self.algo.cfg.mini_batch_size
        n_batches = dist.all_max(-(-len(samples) // mb))
        batches = []
        for j in range(n_batches):
            chunk = samples[j::n_batches]
            b = collate(chunk or samples[:1], module.tokenizer.pad_token_id)
            if not chunk:
                b["loss_mask"] = torch.zeros_like(b["loss_mask"])
            # in the fit's forward context (its precision plugin's autocast, if any), as the training step computes
            # the new log-probs: under bf16-mixed the same autocast, not float32 against bfloat16
            with fit_context(self.trainer):
                b["old_logp"] = module.logprobs(b)
                if self.algo.needs_reference:
                    b["ref_logp"] = module.logprobs(b, reference=True)
            batches.append(b)
        return batches

    def account(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """Count the iteration's transitions (all ranks) against the budget; the rollout statistics."""
        sums = episode_sums(trajs)
        rets = [trajectory_return(t, self.algo.cfg) for t in trajs]
        mixed, groups = mixed_groups([t.task.task_id for t in trajs], rets)  # a task's G episodes share a rank
        tot = dist.all_sum(sums + [sum(rets), float(mixed), float(groups)])
        stats = stats_from_sums(tot[:5])
        self.local_consumed += int(sums[4])
        self.consumed += int(stats["transitions"])
        self.episodes += int(tot[0])
        return {"rollout/success_rate": stats["success_rate"], "rollout/mean_score": stats["mean_score"],
                "rollout/mean_return": tot[5] / max(1.0, tot[0]),
                "rollout/invalid_action_rate": stats["invalid_action_rate"], "rollout/mean_steps": stats["mean_steps"],
                "rollout/episodes": tot[0],
                # groups whose returns differ: the only ones that give a group-relative advantage a gradient
                "rollout/mixed_groups_share": tot[6] / max(1.0, tot[7]),
                f"budget/{self.source}_transitions": float(self.consumed), "rollout/iteration": float(self.iteration)}

    def _notify(self, hook: str, *args: Any) -> None:
        trainer = self.trainer
        for cb in trainer.callbacks:
            fn = getattr(cb, hook, None)
            if fn is not None:
                fn(trainer, trainer.lightning_module, self, *args)
