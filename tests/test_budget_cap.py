"""The hard real budget of an RL stage (`rl.budget_cap` / `s2r.budget_cap`): rollout/datamodule.tasks_within_budget."""

from dreamgym_pl.rollout.datamodule import tasks_within_budget


def test_tasks_within_budget_by_hand():
    # 600 left, 8 episodes of <= 10 steps a task: 80 a task -> 7 tasks (560 <= 600), not 8 (640)
    assert tasks_within_budget(600, 8, 8, 10) == 7
    assert tasks_within_budget(640, 8, 8, 10) == 8
    assert tasks_within_budget(10_000, 8, 8, 10) == 8      # never more than tasks_per_iter
    assert tasks_within_budget(79, 8, 8, 10) == 0          # not one task fits: the stage ends
    assert tasks_within_budget(0, 8, 8, 10) == 0
    assert tasks_within_budget(-5, 8, 8, 10) == 0          # a budget already passed
    assert tasks_within_budget(27, 8, 9, 3) == 1           # 9 episodes of <= 3 steps: exactly one task fits


def test_capped_iterations_never_pass_the_budget():
    """Iterate the cap as the datamodule does, with every episode at its longest: the total stays within budget
    and stops only when not one more task fits."""
    budget, used, iters = 600, 0, 0
    while (n := tasks_within_budget(budget - used, 8, 8, 10)) > 0:
        used += n * 8 * 10
        iters += 1
    assert used <= budget and budget - used < 80 and iters == 1  # 7 tasks at 80: 560, then 40 left
