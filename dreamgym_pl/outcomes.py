"""Per-goal evaluation outcomes and the paired comparison of two methods over goals and seeds.

The eval stage writes `<run dir>/eval/<split>_outcomes.jsonl` (one line per episode: task id, success, score).
`paired_bootstrap` compares method B with method A on the goals both were evaluated on: each replicate draws
seeds with replacement (the runs of each method, paired by position; a method with one run, e.g. a deterministic
SFT start, is paired with every run of the other) and goals with replacement, and takes the mean of B - A.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Sequence

from dreamgym_pl.core import Trajectory, write_jsonl
from dreamgym_pl.run import CorruptFileError


def outcome_rows(trajs: Sequence[Trajectory]) -> list[dict]:
    """One row per episode: {"task_id", "success" (0/1), "score" (the final reward)}."""
    return [{"task_id": t.task.task_id, "success": int(t.success), "score": t.final_reward} for t in trajs]


def write_outcomes(path: Path, rows: Sequence[dict]) -> None:
    """The rows as JSON lines (an atomic write)."""
    write_jsonl(path, rows)


def read_outcomes(path: Path, key: str = "success") -> dict[str, float]:
    """task id -> `key` (success or score) of an outcomes file; a malformed line names the file and line."""
    out: dict[str, float] = {}
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
            out[str(row["task_id"])] = float(row[key])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{path}:{i}: not an outcome line ({e}); rerun the eval stage") from e
    return out


def common_goals(runs: Sequence[dict[str, float]]) -> list[str]:
    """The goals every run was evaluated on, sorted."""
    return sorted(set.intersection(*(set(r) for r in runs))) if runs else []


def paired_bootstrap(a: Sequence[dict[str, float]], b: Sequence[dict[str, float]], n_boot: int = 2000,
                     seed: int = 0) -> tuple[float, float, float]:
    """(mean of B - A, 2.5th and 97.5th percentile) over the goals every run holds; `a`, `b`: one task -> value
    mapping per seed (runs paired by position; a single run pairs with each run of the other side). Each
    replicate draws seeds and goals with replacement, the same goals for every seed and both sides."""
    if not a or not b:
        raise ValueError("paired_bootstrap needs at least one run on each side")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    n = max(len(a), len(b))
    if len(a) not in (1, n) or len(b) not in (1, n):
        raise ValueError(f"runs pair by seed: {len(a)} vs {len(b)} (one side may have a single run)")
    goals = common_goals(list(a) + list(b))
    if not goals:
        raise ValueError("no goal was evaluated by every run")
    diffs = [[b[s if len(b) > 1 else 0][g] - a[s if len(a) > 1 else 0][g] for g in goals] for s in range(n)]
    mean = sum(map(sum, diffs)) / (n * len(goals))
    rng = random.Random(seed)
    reps = []
    for _ in range(n_boot):
        seeds = [rng.randrange(n) for _ in range(n)]
        idx = [rng.randrange(len(goals)) for _ in range(len(goals))]
        reps.append(sum(diffs[s][i] for s in seeds for i in idx) / (n * len(goals)))
    reps.sort()
    return mean, reps[int(0.025 * (n_boot - 1))], reps[int(0.975 * (n_boot - 1))]


def flips(a: dict[str, float], b: dict[str, float], goals: Sequence[str] | None = None) -> tuple[int, int, int]:
    """(goals where B's value is above A's, goals where it is below, goals compared) on one pair of runs, over
    `goals` (default: the goals both hold): for success outcomes, the discordant pairs. Their sum is how much of
    B's greedy behaviour differs in outcome from A's; a small net change can hide a large churn (measured: real
    GRPO at 24k real transitions fixes 50 test goals and breaks 43 of its SFT start's)."""
    goals = common_goals([a, b]) if goals is None else list(goals)
    return (sum(1 for g in goals if b[g] > a[g]), sum(1 for g in goals if b[g] < a[g]), len(goals))
