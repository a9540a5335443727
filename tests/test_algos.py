"""Algorithm plug-ins: each config dataclass is the one source of defaults and its YAML mirrors it; lookup by
name; hand-computed advantages through the plug-in interface."""

import dataclasses

import pytest
from omegaconf import OmegaConf

from dreamgym_pl.core import Observation, Task, Trajectory, Transition
from dreamgym_pl.policy.algos import GRPO, RL_ALGORITHMS, GRPOConfig, rl_algorithm
from dreamgym_pl.policy.algos.base import step_rewards, trajectory_return
from dreamgym_pl.policy.samples import StepSample
from tests.conftest import ROOT


def test_every_algorithm_has_its_config_declared_once():
    from dreamgym_pl.algo_config import ALGO_CONFIGS

    assert {n: a.config_cls for n, a in RL_ALGORITHMS.items()} == ALGO_CONFIGS
    assert not (ROOT / "conf" / "algo").exists()  # no YAML copy of the dataclasses to keep in step


@pytest.mark.parametrize("name", sorted(RL_ALGORITHMS))
def test_the_hydra_option_is_the_dataclass(name):
    """`algo=<name>` composes to the dataclass's defaults, the root config's default included (grpo)."""
    from tests.conftest import compose

    defaults = dataclasses.asdict(RL_ALGORITHMS[name].config_cls())
    assert OmegaConf.to_container(compose([f"algo={name}"]).algo) == defaults
    assert defaults["name"] == name
    if name == "grpo":
        assert OmegaConf.to_container(compose([]).algo) == defaults


def test_lookup_by_name():
    assert isinstance(rl_algorithm({"name": "grpo"}), GRPO)
    with pytest.raises(KeyError, match="algo.name: unknown algorithm 'a2c'; known: \\['grpo', 'ppo'\\]"):
        rl_algorithm({"name": "a2c"})
    with pytest.raises(KeyError, match="algo.gae_lambda"):
        rl_algorithm({"name": "grpo", "gae_lambda": 0.9})


def _traj(task: str, rewards: list[float], invalid: list[bool], success: bool) -> Trajectory:
    t = Task(task, task)
    trs = [Transition(t, i, Observation("s"), "a", Observation("s"), r, i == len(rewards) - 1, info={"invalid": inv})
           for i, (r, inv) in enumerate(zip(rewards, invalid))]
    trs[-1].info["success"] = success
    return Trajectory(task=t, transitions=trs)


def test_returns_hand_computed():
    cfg = GRPOConfig(reward="score", invalid_penalty=0.1)
    tr = _traj("a", [0.0, 0.0, 0.5], [False, True, False], False)
    assert trajectory_return(tr, cfg) == pytest.approx(0.5 - 0.1)
    assert step_rewards(tr, cfg) == pytest.approx([0.0, -0.1, 0.5])
    assert trajectory_return(tr, GRPOConfig(reward="success", invalid_penalty=0.1)) == pytest.approx(-0.1)


def test_grpo_advantages_are_group_relative():
    """Two groups: returns (1, 0) in task a, (0, 0) in task b; mean-only advantages (normalize_std=false)."""
    algo = GRPO(GRPOConfig(reward="success", invalid_penalty=0.0, normalize_std=False))
    trajs = [_traj("a", [1.0], [False], True), _traj("a", [0.0], [False], False), _traj("b", [0.0, 0.0], [False] * 2, False),
             _traj("b", [0.0], [False], False)]
    per = [[StepSample([1], [2]) for _ in t.transitions] for t in trajs]
    out = algo.with_advantages(trajs, per, None, 0)
    assert [s.scalars["adv"] for s in out] == pytest.approx([0.5, -0.5, 0.0, 0.0, 0.0])
    assert algo.task_values(trajs, None, 8) == pytest.approx({"a": 0.25, "b": 0.0})
