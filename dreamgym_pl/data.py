"""Data for policy training: offline SFT/DPO datasets and the on-the-fly rollout stream for GRPO/PPO.

`RolloutStream` is an IterableDataset: on every iteration it collects fresh rollouts with the current
policy (the engine shares the trainer's module), computes advantages, recomputes old log-probs (and
reference log-probs / values) with the trainer's model, and yields mini-batches. It stops when its
transition budget is spent, which ends the Lightning epoch and the stage.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, IterableDataset

from dreamgym_pl import dist
from dreamgym_pl.core import Task, Trajectory
from dreamgym_pl.envs.base import VecEnv
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.module import AlgoConfig, PolicyModule
from dreamgym_pl.policy.samples import StepSample, collate, trajectory_samples
from dreamgym_pl.rollout.actor import PolicyActor
from dreamgym_pl.rollout.collector import episode_sums, run_episodes, stats_from_sums
from dreamgym_pl.rollout.engine import HFEngine, SamplingParams
from dreamgym_pl.rollout.prompts import PromptConfig


# ----- offline: SFT and DPO ------------------------------------------------------------------------
def sft_loader(trajs: Sequence[Trajectory], tokenizer: Any, prompt_cfg: PromptConfig, batch_size: int,
               seed: int = 0, max_prompt_tokens: int = 1024) -> DataLoader:
    samples = [s for i, t in enumerate(trajs) for s in trajectory_samples(t, tokenizer, prompt_cfg, max_prompt_tokens, i)]
    if not samples:
        raise ValueError("sft: no training samples (no successful offline trajectories of the chosen source)")
    g = torch.Generator().manual_seed(seed)
    return DataLoader(samples, batch_size=batch_size, shuffle=True, generator=g,
                      collate_fn=lambda b: collate(b, tokenizer.pad_token_id))


def dpo_pairs(trajs: Sequence[Trajectory], max_pairs: int, seed: int = 0) -> list[tuple[Trajectory, Trajectory]]:
    """(successful, failed) trajectory pairs of the same goal."""
    by_task: dict[str, dict[str, list[Trajectory]]] = defaultdict(lambda: {"ok": [], "bad": []})
    for t in trajs:
        by_task[t.task.task_id]["ok" if t.success else "bad"].append(t)
    pairs = [(c, r) for d in by_task.values() for c in d["ok"] for r in d["bad"]]
    random.Random(seed).shuffle(pairs)
    return pairs[:max_pairs]


def dpo_loader(pairs: Sequence[tuple[Trajectory, Trajectory]], module: PolicyModule, prompt_cfg: PromptConfig,
               pairs_per_batch: int, seed: int = 0, max_prompt_tokens: int = 1024) -> DataLoader:
    """Batches of whole pairs: every step of both trajectories, tagged with pair index and side, with the
    reference policy's summed response log-prob per step precomputed."""
    tok = module.tokenizer
    batches = []
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    for start in range(0, len(order), pairs_per_batch):
        samples: list[StepSample] = []
        for j, pi in enumerate(order[start:start + pairs_per_batch]):
            for side, traj in ((1, pairs[pi][0]), (0, pairs[pi][1])):
                for s in trajectory_samples(traj, tok, prompt_cfg, max_prompt_tokens):
                    s.scalars = {"pair": j, "side": side}
                    samples.append(s)
        b = collate(samples, tok.pad_token_id)
        ref = module.logprobs(b, reference=True)
        b["ref_seq_logp"] = (ref * b["loss_mask"]).sum(-1)
        b["pair"] = b["pair"].long()
        b["side"] = b["side"].long()
        batches.append(b)
    return DataLoader(batches, batch_size=None, shuffle=False)


# ----- online: rollouts -----------------------------------------------------------------------------
def trajectory_return(traj: Trajectory, algo: AlgoConfig) -> float:
    r = traj.final_reward if algo.reward == "score" else float(traj.success)
    n_invalid = sum(1 for s in traj.transitions if s.info.get("invalid"))
    return r - algo.invalid_penalty * n_invalid


def step_rewards(traj: Trajectory, algo: AlgoConfig) -> list[float]:
    """Per-step rewards for PPO: the outcome at the last step, the invalid-action penalty where it occurred."""
    rs = [-algo.invalid_penalty if s.info.get("invalid") else 0.0 for s in traj.transitions]
    if rs:
        rs[-1] += traj.final_reward if algo.reward == "score" else float(traj.success)
    return rs


def evaluate_policy(model: Any, tokenizer: Any, env: VecEnv, tasks: Sequence[Task], prompt_cfg: PromptConfig,
                    max_new_tokens: int = 16, batch_size: int = 64, progress: bool | str = False,
                    engine: Any = None) -> dict[str, float]:
    """Greedy policy on `tasks` (one episode each): success rate, mean score, invalid-action rate. Under
    data parallelism each rank plays its share of the tasks and the counts are summed."""
    engine = engine or HFEngine(model, tokenizer, micro_batch=batch_size)
    actor = PolicyActor(engine, prompt_cfg, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=["]"]))
    mine = dist.shard(tasks)
    trajs = run_episodes(env, mine, actor, batch_size=batch_size, source="eval", progress=progress) if mine else []
    return stats_from_sums(dist.all_sum(episode_sums(trajs)))


class RolloutStream(IterableDataset):
    def __init__(self, module: PolicyModule, env: VecEnv, tasks: Sequence[Task], algo: AlgoConfig,
                 prompt_cfg: PromptConfig, budget: int, tasks_per_iter: int, max_iters: int = 10**9,
                 gen_batch: int = 64, seed: int = 0, source: str = "real",
                 on_iteration: Callable[[int, list[Trajectory], dict[str, float]], None] | None = None,
                 task_sampler: Callable[[int, list[Trajectory] | None], list[Task]] | None = None,
                 max_prompt_tokens: int = 1024, checkpoint: Callable[["RolloutStream"], None] | None = None,
                 checkpoint_every: int = 0, resume_state: dict | None = None,
                 engine_factory: Callable[[Any, Any], Any] | None = None):
        self.module, self.env, self.tasks, self.algo = module, env, list(tasks), algo
        self.prompt_cfg, self.budget, self.tasks_per_iter = prompt_cfg, budget, tasks_per_iter
        self.max_iters, self.gen_batch, self.seed, self.source = max_iters, gen_batch, seed, source
        self.on_iteration = on_iteration
        self.task_sampler = task_sampler
        self.max_prompt_tokens = max_prompt_tokens
        self.consumed = 0  # transitions of all ranks
        self.rollout_s = 0.0  # wall time spent collecting rollouts (policy generation + env steps)
        self.local_consumed = 0  # this rank's
        self.rank_log: list[list[str]] = []  # task ids this rank rolled out, per iteration
        self.iteration = 0
        self.history: list[dict[str, float]] = []
        self.checkpoint, self.checkpoint_every = checkpoint, checkpoint_every
        self.resume_state = resume_state
        self.engine_factory = engine_factory
        if resume_state:  # continue a killed stage from its last checkpoint
            self.consumed = int(resume_state["consumed"])
            self.iteration = int(resume_state["iteration"])
            self.history = list(resume_state.get("history", []))
            self.rollout_s = float(resume_state.get("rollout_s", 0.0))

    @property
    def transitions_per_s(self) -> float:
        """Rollout throughput of the stage: transitions (all ranks) per second of collection wall time."""
        return self.consumed / self.rollout_s if self.rollout_s > 0 else 0.0

    def state(self) -> dict:
        return {"consumed": self.consumed, "iteration": self.iteration, "history": self.history,
                "rollout_s": self.rollout_s}

    def _iteration_tasks(self, last: list[Trajectory] | None) -> list[Task]:
        """The iteration's tasks, identical on every rank: the default sampler is seeded by the iteration; a
        task sampler (the curriculum) runs on rank 0 over every rank's trajectories and is broadcast."""
        if not self.task_sampler:
            return self._default_tasks(self.iteration)
        if dist.world() == 1:
            return self.task_sampler(self.iteration, last)
        every = [t for part in dist.all_gather_objects(last) if part for t in part] if last is not None else None
        tasks = self.task_sampler(self.iteration, every) if dist.is_main() else None
        return dist.all_gather_objects(tasks)[0]

    def _default_tasks(self, it: int) -> list[Task]:
        rng = random.Random(self.seed * 100003 + it)
        return rng.sample(self.tasks, min(self.tasks_per_iter, len(self.tasks)))

    def _build_samples(self, trajs: list[Trajectory]) -> list[StepSample]:
        tok, algo = self.module.tokenizer, self.algo
        per_traj = [trajectory_samples(t, tok, self.prompt_cfg, self.max_prompt_tokens, i) for i, t in enumerate(trajs)]
        if algo.name == "grpo":
            rets = [trajectory_return(t, algo) for t in trajs]
            adv = losses.group_advantages(rets, [t.task.task_id for t in trajs], algo.adv_eps, algo.normalize_std)
            for i, ss in enumerate(per_traj):
                for s in ss:
                    s.scalars = {"adv": adv[i]}
            return [s for ss in per_traj for s in ss]
        # PPO: values of every step, GAE per trajectory, whitened advantages
        flat = [s for ss in per_traj for s in ss]
        vals: list[float] = []
        for i in range(0, len(flat), algo.mini_batch_size):
            b = collate(flat[i:i + algo.mini_batch_size], tok.pad_token_id)
            vals.extend(self.module.values(b).tolist())
        k = 0
        advs: list[float] = []
        rets_all: list[float] = []
        for t, ss in zip(trajs, per_traj):
            v = vals[k:k + len(ss)]
            a, r = losses.gae(step_rewards(t, algo), v, algo.gamma, algo.lam)
            advs += a
            rets_all += r
            k += len(ss)
        at = torch.tensor(advs)
        at = (at - at.mean()) / (at.std() + 1e-8) if len(advs) > 1 else at
        for s, a, r, v in zip(flat, at.tolist(), rets_all, vals):
            s.scalars = {"adv": a, "returns": r, "old_values": v}
        return flat

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        module, algo = self.module, self.algo
        engine = (self.engine_factory(module.model, module.tokenizer) if self.engine_factory
                  else HFEngine(module.model, module.tokenizer, micro_batch=self.gen_batch))
        params = SamplingParams(temperature=algo.temperature, top_p=algo.top_p, max_new_tokens=algo.max_new_tokens, stop=["]"])
        actor = PolicyActor(engine, self.prompt_cfg, params)
        last: list[Trajectory] | None = None
        if self.resume_state and self.resume_state.get("optimizer") is not None:
            module.trainer.optimizers[0].load_state_dict(self.resume_state["optimizer"])
        while self.consumed < self.budget and self.iteration < self.max_iters:
            # every batch of the previous iteration has been trained on here: a consistent point to save
            if self.checkpoint and self.checkpoint_every and self.iteration % self.checkpoint_every == 0 \
                    and last is not None:
                self.checkpoint(self)
            rng = random.Random(self.seed * 7919 + self.iteration)
            tasks = self._iteration_tasks(last)
            mine = dist.shard(tasks)  # data parallel: each rank rolls out its share of the tasks (all G each)
            if not mine:
                raise ValueError(f"tasks_per_iter ({len(tasks)}) must be >= the number of ranks ({dist.world()})")
            self.rank_log.append([t.task_id for t in mine])
            rollout_tasks = [t for t in mine for _ in range(algo.group_size)]
            engine.load_weights(module.model)
            t0 = time.perf_counter()
            tok0 = engine.generated_tokens
            trajs = run_episodes(self.env, rollout_tasks, actor, batch_size=self.gen_batch, source=self.source)
            gen_s = time.perf_counter() - t0
            self.rollout_s += gen_s
            if hasattr(engine, "sleep"):
                engine.sleep()  # colocated engines give the trainer their memory until the next rollouts
            last = trajs
            sums = episode_sums(trajs)
            rets = [trajectory_return(t, algo) for t in trajs]
            tot = dist.all_sum(sums + [sum(rets)])
            stats = stats_from_sums(tot[:5])
            self.local_consumed += int(sums[4])
            self.consumed += int(stats["transitions"])
            samples = self._build_samples(trajs)
            rng.shuffle(samples)
            batches = []
            n_batches = dist.all_max(-(-len(samples) // algo.mini_batch_size))  # equal on every rank (DDP)
            for j in range(n_batches):
                chunk = samples[j::n_batches]
                b = collate(chunk or samples[:1], module.tokenizer.pad_token_id)
                if not chunk:  # this rank has fewer samples: a batch that contributes no gradient
                    b["loss_mask"] = torch.zeros_like(b["loss_mask"])
                b["old_logp"] = module.logprobs(b)
                if algo.kl_coef > 0:
                    b["ref_logp"] = module.logprobs(b, reference=True)
                batches.append(b)
            logs = {
                "rollout/success_rate": stats["success_rate"],
                "rollout/mean_score": stats["mean_score"],
                "rollout/mean_return": tot[5] / max(1.0, tot[0]),
                "rollout/invalid_action_rate": stats["invalid_action_rate"],
                "rollout/mean_steps": stats["mean_steps"],
                f"budget/{self.source}_transitions": float(self.consumed),
                "perf/gen_tokens_per_s": (engine.generated_tokens - tok0) / max(gen_s, 1e-9),
                "rollout/iteration": float(self.iteration),
            }
            module.pending_logs = dict(logs)
            if self.on_iteration:  # hooks may add to logs (curriculum, test curve) before they are recorded
                self.on_iteration(self.iteration, trajs, logs)
            self.history.append(dict(logs))
            self.iteration += 1
            for _ in range(algo.ppo_epochs):
                order = list(range(len(batches)))
                rng.shuffle(order)
                for j in order:
                    yield batches[j]
