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

from dreamgym_pl.core import Trajectory
from dreamgym_pl.run import CorruptFileError


def write_outcomes(path: Path, trajs: Sequence[Trajectory]) -> None:
    """One JSON line per episode: {"task_id", "success" (0/1), "score" (the final reward)}."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for t in trajs:
            f.write(json.dumps({"task_id": t.task.task_id, "success": int(t.success), "score": t.final_reward}) + "\n")
    tmp.replace(path)


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


def paired_bootstrap(a: Sequence[dict[str, float]], b: Sequence[dict[str, float]], n_boot: int = 2000,
                     seed: int = 0) -> tuple[float, float, float]:
    """(mean of B - A, 2.5th and 97.5th percentile) over the goals every run holds; `a`, `b`: one task -> value
    mapping per seed (runs paired by position; a single run pairs with each run of the other side)."""
    if not a or not b:
        raise ValueError("paired_bootstrap needs at least one run on each side")
    n = max(len(a), len(b))
    if len(a) not in (1, n) or len(b) not in (1, n):
        raise ValueError(f"runs pair by seed: {len(a)} vs {len(b)} (one side may have a single run)")
    goals = sorted(set.intersection(*(set(r) for r in list(a) + list(b))))
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
