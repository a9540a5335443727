"""Per-goal outcomes and the paired bootstrap (hand-computed values)."""

import pytest

from dreamgym_pl.core import Task, Trajectory, Transition, Observation
from dreamgym_pl.outcomes import flips, outcome_rows, paired_bootstrap, read_outcomes, write_outcomes
from dreamgym_pl.run import CorruptFileError


def _traj(tid: str, success: bool, reward: float) -> Trajectory:
    task = Task(task_id=tid, instruction="x", goal={})
    obs = Observation(text="s", admissible=[])
    return Trajectory(task, [Transition(task, 0, obs, "a", obs, reward, True, info={"success": success})])


def test_write_and_read_outcomes(tmp_path):
    p = tmp_path / "eval" / "test_outcomes.jsonl"
    write_outcomes(p, outcome_rows([_traj("g1", True, 1.0), _traj("g2", False, 0.5)]))
    assert read_outcomes(p) == {"g1": 1.0, "g2": 0.0}
    assert read_outcomes(p, "score") == {"g1": 1.0, "g2": 0.5}
    p.write_text('{"task_id": "g1", "success": 1}\nnot json\n')
    with pytest.raises(CorruptFileError, match="test_outcomes.jsonl:2"):
        read_outcomes(p)


def test_paired_bootstrap_hand_values():
    a = [{"g1": 0, "g2": 1, "g3": 0, "g4": 1}]  # one deterministic start, paired with every seed of B
    b = [{"g1": 1, "g2": 1, "g3": 0, "g4": 1}, {"g1": 1, "g2": 1, "g3": 1, "g4": 1}]
    mean, lo, hi = paired_bootstrap(a, b, n_boot=500)
    assert mean == pytest.approx((1 + 2) / 8)  # per-goal differences: seed 0 [1,0,0,0], seed 1 [1,0,1,0]
    assert 0 <= lo <= mean <= hi <= 1
    same = paired_bootstrap(a, a)
    assert same == (0.0, 0.0, 0.0)  # identical runs: no difference in any replicate
    # a constant improvement on every goal and seed has a degenerate interval at that value
    up = [{k: v + 0.5 for k, v in a[0].items()}] * 3
    assert paired_bootstrap(a, up) == pytest.approx((0.5, 0.5, 0.5))
    # only the goals every run holds are compared
    assert paired_bootstrap([{"g1": 0, "x": 1}], [{"g1": 1}])[0] == 1.0


def test_paired_bootstrap_resamples_seeds_and_goals():
    zeros = {f"g{i}": 0 for i in range(4)}
    # differences constant over goals, 1 for one seed and 0 for the other: only resampling seeds spreads them,
    # and a replicate that draws the same seed twice reaches each end exactly
    assert paired_bootstrap([zeros], [{g: 1 for g in zeros}, zeros], n_boot=400) == pytest.approx((0.5, 0.0, 1.0))
    # one seed, goal differences [1, 0, 0, 0]: only resampling goals spreads them (0 to 3 of 4 draws hit g0)
    mean, lo, hi = paired_bootstrap([zeros], [{**zeros, "g0": 1}], n_boot=2000)
    assert (mean, lo, hi) == pytest.approx((0.25, 0.0, 0.75))


def test_paired_bootstrap_refuses_unpairable_runs():
    with pytest.raises(ValueError, match="pair by seed"):
        paired_bootstrap([{"g": 0}] * 2, [{"g": 1}] * 3)
    with pytest.raises(ValueError, match="no goal"):
        paired_bootstrap([{"g": 0}], [{"h": 1}])
    with pytest.raises(ValueError, match="n_boot"):
        paired_bootstrap([{"g": 0}], [{"g": 1}], n_boot=0)


def test_flips_hand_values():
    a = {"g1": 0, "g2": 1, "g3": 1, "g4": 0, "only_a": 1}
    b = {"g1": 1, "g2": 0, "g3": 1, "g4": 0, "only_b": 0}
    assert flips(a, b) == (1, 1, 4)  # g1 gained, g2 lost, g3/g4 unchanged; goals outside both are ignored
    assert flips(b, a) == (1, 1, 4)
    assert flips(a, a) == (0, 0, 5)
    assert flips({"g": 0}, {"g": 1}) == (1, 0, 1)
    assert flips(a, b, goals=["g1", "g3"]) == (1, 0, 2)  # only the goals asked for (compare_runs: every run's)


def test_compare_runs_prints_the_flips(tmp_path, monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    def run_dir(name, seed, successes):
        d = tmp_path / name
        (d / "eval").mkdir(parents=True)
        (d / "config.yaml").write_text(f"seed: {seed}\n")
        write_outcomes(d / "eval" / "test_outcomes.jsonl",
                       [{"task_id": f"g{i}", "success": s, "score": float(s)} for i, s in enumerate(successes)])
        return str(d)

    sft = run_dir("sft", 0, [0, 1, 1, 0])
    rl = [run_dir("rl0", 0, [1, 0, 1, 0]), run_dir("rl1", 1, [1, 1, 1, 1])]
    script = Path(__file__).resolve().parents[1] / "experiments" / "compare_runs.py"
    monkeypatch.setattr(sys, "argv", ["compare_runs.py", "--a", sft, "--b", *rl, "--n-boot", "50"])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "seed 0: B better on 1 goals, worse on 1, of 4 (0.50 of them differ)" in out
    assert "seed 1: B better on 2 goals, worse on 0, of 4 (0.50 of them differ)" in out
    assert "B - A over 4 goals x 2 seeds: +0.2500" in out  # (0 + 2) / 8
    # one run a side with different seeds; flips count the goals every run holds (g3 is missing from B)
    other = run_dir("rl3", 3, [1, 1])
    monkeypatch.setattr(sys, "argv", ["compare_runs.py", "--a", sft, "--b", other, "--n-boot", "50"])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "seed 0 vs 3: B better on 1 goals, worse on 0, of 2 (0.50 of them differ)" in out
    assert "B - A over 2 goals x 1 seeds: +0.5000" in out
