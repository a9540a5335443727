"""Which offline episodes SFT clones: successes of the chosen source, or (sft.min_score) every episode whose final
reward reaches the floor."""

from types import SimpleNamespace

from omegaconf import OmegaConf

from dreamgym_pl.core import Task, Trajectory, Transition
from dreamgym_pl.stages.sft import sft_trajectories


def _traj(source: str, reward: float) -> Trajectory:
    step = Transition(task=Task("t", "buy"), step=0, state=None, action="click[buy now]", next_state=None,
                      reward=reward, done=True, source=source, info={"success": reward >= 1.0})
    return Trajectory(task=step.task, transitions=[step], source=source)


def _run(trajs, **sft):
    cfg = OmegaConf.create({"sft": {"source": "all", "num_trajectories": 0, "min_score": None, **sft}})
    return SimpleNamespace(cfg=cfg, offline_trajectories=lambda: trajs)


def test_min_score_selects_by_final_reward():
    trajs = [_traj("oracle", 1.0), _traj("hasty", 0.75), _traj("hasty", 1.0), _traj("random", 0.2),
             Trajectory(task=Task("u", "x"), source="hasty")]
    got = lambda **kw: [(t.source, t.final_reward) for t in sft_trajectories(_run(trajs, **kw))]
    assert got() == [("oracle", 1.0), ("hasty", 1.0)]  # successes only
    assert got(min_score=0.5) == [("oracle", 1.0), ("hasty", 0.75), ("hasty", 1.0)]
    assert got(min_score=0.5, source="hasty") == [("hasty", 0.75), ("hasty", 1.0)]
    assert got(min_score=0.0, source="hasty", num_trajectories=1) == [("hasty", 0.75)]
    assert got(min_score=0.0, source="hasty") == [("hasty", 0.75), ("hasty", 1.0)]  # an empty episode never
