"""Curriculum task generation (paper Eq. 6-7): reward-variance selection and lambda-bounded mixing.

Pure functions here; the task generator (the experience model prompted as M_task) and the wiring into the
synthetic RL stage use them.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from dreamgym_pl.core import Task


def task_variance(rewards: Sequence[float]) -> float:
    """V_tau = mean((r_i - mean r)^2) (population variance): 0 if always solved or always failed, 0.25 at a
    50/50 split of binary rewards."""
    if not rewards:
        return 0.0
    m = sum(rewards) / len(rewards)
    return sum((r - m) ** 2 for r in rewards) / len(rewards)


def group_variances(task_ids: Sequence[str], rewards: Sequence[float]) -> dict[str, float]:
    groups: dict[str, list[float]] = {}
    for t, r in zip(task_ids, rewards):
        groups.setdefault(t, []).append(float(r))
    return {t: task_variance(rs) for t, rs in groups.items()}


def select_seeds(variances: dict[str, float], min_variance: float, num_seeds: int) -> list[str]:
    """Task ids with V >= min_variance, highest first (ties by id, for determinism), at most num_seeds."""
    ok = [(v, t) for t, v in variances.items() if v >= min_variance]
    ok.sort(key=lambda x: (-x[0], x[1]))
    return [t for _, t in ok[:num_seeds]]


def max_generated(batch_size: int, max_share: float) -> int:
    """The most generated tasks a batch of `batch_size` may hold under the bound lambda (`curriculum.lambda_`)."""
    if not 0.0 <= max_share <= 1.0:
        raise ValueError(f"curriculum.lambda_: must lie in [0, 1], got {max_share}")
    return int(math.floor(max_share * batch_size + 1e-9))


def mix_batch(original: Sequence[Task], generated: Sequence[Task], batch_size: int, max_share: float,
              rng: random.Random) -> list[Task]:
    """A batch with at most floor(lambda * B) generated tasks (the newest first), the rest original tasks
    drawn without replacement so their coverage is kept."""
    n_gen = min(len(generated), max_generated(batch_size, max_share))
    gen = list(generated)[-n_gen:] if n_gen else []
    orig = rng.sample(list(original), min(len(original), batch_size - n_gen))
    return orig + gen


def cluster_groups(embeddings: np.ndarray, num_clusters: int, seed: int = 0, iters: int = 20) -> list[int]:
    """k-means (cosine, on normalised rows) cluster ids, used as groups for PPO which has none."""
    n = len(embeddings)
    if n == 0:
        return []
    k = max(1, min(num_clusters, n))
    rng = np.random.default_rng(seed)
    x = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    centers = x[rng.choice(n, size=k, replace=False)]
    labels = np.zeros(n, dtype=int)
    for _ in range(iters):
        labels = np.argmax(x @ centers.T, axis=1)
        new = np.stack([x[labels == c].mean(0) if np.any(labels == c) else centers[c] for c in range(k)])
        new /= np.maximum(np.linalg.norm(new, axis=1, keepdims=True), 1e-12)
        if np.allclose(new, centers):
            break
        centers = new
    return labels.tolist()


def parse_generated_task(text: str, max_words: int = 40) -> str | None:
    """The instruction in a generated `<task> ... </task>`; None if missing, empty or over-long."""
    m = re.search(r"<\s*task\s*>(.*?)<\s*/\s*task\s*>", text, re.DOTALL | re.IGNORECASE)
    if not m:
        return None
    s = " ".join(m.group(1).split())
    if not s or len(s.split()) > max_words:
        return None
    return s


def task_generation_prompt(seed_instruction: str) -> str:
    return (f"seed task : {seed_instruction} \nwrite a new task that is challenging but feasible , meaningfully "
            f"different and realistic : ")


@dataclass
class CurriculumState:
    """Saved with checkpoints so that a resumed run continues the curriculum."""

    values: dict[str, float] = field(default_factory=dict)
    generated: list[Task] = field(default_factory=list)
    rejected: int = 0
    shares: list[float] = field(default_factory=list)


class Curriculum:
    """Per-iteration task sampler for synthetic RL: values tasks by their group reward variance, asks the task
    generator (the experience model as M_task) for variations of the highest-variance seeds, and mixes at
    most a share lambda of generated tasks into each batch.

    `generate(prompts) -> texts` is the generator; `task_values(trajectories) -> {task id: value}` values the
    tasks of an iteration (the RL algorithm's grouping: GRPO groups, PPO clusters).
    """

    def __init__(self, original: Sequence[Task], generate: Callable[[list[str]], list[str]],
                 task_values: Callable[[list], dict[str, float]], max_share: float, min_variance: float,
                 num_seeds: int, batch_size: int, seed: int = 0, max_words: int = 40,
                 state: CurriculumState | None = None, held_out: Sequence[str] = ()):
        """`held_out`: instructions a generated task must never equal (the val and test tasks')."""
        max_generated(batch_size, max_share)  # validates lambda
        self.original = list(original)
        self.generate = generate
        self.task_values = task_values
        self.max_share, self.min_variance, self.num_seeds = max_share, min_variance, num_seeds
        self.batch_size = batch_size
        self.max_words = max_words
        self.rng = random.Random(seed)
        self.state = state or CurriculumState()
        self.known = {t.instruction for t in self.original} | {t.instruction for t in self.state.generated} \
            | set(held_out)
        self.last_logs: dict[str, float] = {}
        self.last_new: list[Task] = []

    def update(self, trajs) -> None:
        by_id = {t.task.task_id: t.task for t in trajs}
        values = self.task_values(trajs)
        self.state.values.update(values)
        self.last_new = []
        seeds = select_seeds(values, self.min_variance, self.num_seeds) if self.max_share > 0 else []
        if seeds:
            prompts = [task_generation_prompt(by_id[s].instruction) for s in seeds]
            for sid, text in zip(seeds, self.generate(prompts)):
                instr = parse_generated_task(text, self.max_words)
                if instr is None or instr in self.known:
                    self.state.rejected += 1
                    continue
                parent = by_id[sid]
                task = Task(task_id=f"gen-{len(self.state.generated)}", instruction=instr,
                            goal={"generated": True, "parent_goal": parent.goal}, parent_id=parent.task_id,
                            generation=parent.generation + 1)
                self.known.add(instr)
                self.state.generated.append(task)
                self.last_new.append(task)
        self.last_logs = {"curriculum/mean_variance": float(np.mean(list(values.values()))) if values else 0.0,
                          "curriculum/num_generated": float(len(self.state.generated)),
                          "curriculum/rejected": float(self.state.rejected), "curriculum/seeds": float(len(seeds))}

    def sample(self, last_trajs) -> list[Task]:
        """The next batch of tasks, after learning from the last iteration's trajectories (None: none yet)."""
        if last_trajs:
            self.update(last_trajs)
        batch = mix_batch(self.original, self.state.generated, self.batch_size, self.max_share, self.rng)
        share = sum(1 for t in batch if t.parent_id is not None) / max(1, len(batch))
        self.state.shares.append(share)
        self.last_logs["curriculum/synthetic_share"] = share
        return batch
