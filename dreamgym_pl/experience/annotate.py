"""Reasoning traces for offline transitions (the teacher traces R*_t of the paper's Eq. 5).

`annotate(trajs, explain)` fills each transition's empty `reasoning` with `explain(transition)`: the
environment's ground-truth explanation (`Environment.explain`: what the action did and why the next state
and reward are what they are). This module knows no environment.
"""

from __future__ import annotations

from typing import Callable, Sequence

from dreamgym_pl.core import Trajectory, Transition


def annotate(trajs: Sequence[Trajectory], explain: Callable[[Transition], str]) -> None:
    """Fill empty `reasoning` fields in place with `explain(t)` (usually `env.explain`)."""
    for traj in trajs:
        for t in traj.transitions:
            if not t.reasoning:
                t.reasoning = explain(t)
