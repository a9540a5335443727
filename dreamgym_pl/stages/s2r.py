"""s2r (DreamGym-S2R): continue RL in the real env with a small real budget after synthetic RL."""

from __future__ import annotations

from dreamgym_pl.stages.context import Run
from dreamgym_pl.stages.rl import real_rl


def run_stage(run: Run) -> None:
    c = run.cfg.s2r
    real_rl(run, "s2r", c.real_budget, c.tasks_per_iter, c.max_iters, c.budget_cap)
