"""How much a sampled policy leaves for group-relative RL to find (pure functions, tested by hand values).

Per task, k sampled episodes with c successes: pass@k (the unbiased estimator of Chen et al. 2021: the chance that
at least one of k samples drawn without replacement from n succeeds), and whether the group carries a GRPO signal at
all (a group whose rewards are all equal gets advantage 0 on every step: no gradient).
"""

from __future__ import annotations

from math import comb
from typing import Sequence

from dreamgym_pl.curriculum import group_rewards


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n - c, k) / C(n, k): the chance that k of the n samples, drawn without replacement, hold a success."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def mixed_count(groups: Sequence[Sequence[float]]) -> int:
    """How many groups have rewards that are not all equal (the groups GRPO learns from)."""
    return sum(1 for g in groups if len(set(g)) > 1)


def signal_share(groups: Sequence[Sequence[float]]) -> float:
    """The share of groups whose rewards are not all equal."""
    return mixed_count(groups) / len(groups) if groups else 0.0


def mixed_groups(task_ids: Sequence[str], rewards: Sequence[float]) -> tuple[int, int]:
    """(groups whose rewards are not all equal, groups): episodes grouped by task id, as GRPO groups them."""
    groups = list(group_rewards(task_ids, rewards).values())
    return mixed_count(groups), len(groups)


def headroom(successes: Sequence[Sequence[int]], ks: Sequence[int]) -> dict[str, float]:
    """Per-task success lists (one 0/1 per sampled episode) -> mean sample success, pass@k for each k, and the share
    of tasks never solved / always solved / mixed (the mixed ones carry a success-reward GRPO signal)."""
    if not successes:
        raise ValueError("headroom needs at least one task")
    out = {"tasks": float(len(successes)),
           "sample_success": sum(sum(s) / len(s) for s in successes) / len(successes)}
    for k in ks:
        out[f"pass@{k}"] = sum(pass_at_k(len(s), sum(s), k) for s in successes) / len(successes)
    out["never_solved"] = sum(1 for s in successes if sum(s) == 0) / len(successes)
    out["always_solved"] = sum(1 for s in successes if sum(s) == len(s)) / len(successes)
    out["mixed"] = signal_share(successes)
    return out
