"""Algorithm plug-ins: each config dataclass is the one source of defaults and its YAML mirrors it; lookup by
name; hand-computed advantages through the plug-in interface."""

import dataclasses

import pytest
from omegaconf import OmegaConf

from dreamgym_pl.core import Observation, Task, Trajectory, Transition
from dreamgym_pl.policy.algos import GRPO, RL_ALGORITHMS, GRPOConfig, rl_algorithm, stage_algo_config
from dreamgym_pl.policy.algos.base import step_rewards, trajectory_return
from dreamgym_pl.policy.samples import StepSample
from tests.conftest import ROOT


@pytest.mark.parametrize("name", sorted(RL_ALGORITHMS))
def test_yaml_agrees_with_the_config_dataclass(name):
    yaml = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "algo" / f"{name}.yaml"))
    yaml.pop("defaults", None)
    defaults = dataclasses.asdict(RL_ALGORITHMS[name].config_cls())
    assert yaml == defaults


def test_lookup_by_name():
    assert isinstance(rl_algorithm({"name": "grpo"}), GRPO)
    with pytest.raises(KeyError, match="algo.name: unknown algorithm 'a2c'; known: \\['grpo', 'ppo'\\]"):
        rl_algorithm({"name": "a2c"})
    with pytest.raises(KeyError, match="algo.gae_lambda"):
        rl_algorithm({"name": "grpo", "gae_lambda": 0.9})


def test_stage_algo_config_puts_a_stages_overrides_in():
    algo = {"name": "grpo", "lr": 1e-4, "warmup_steps": 10}
    assert stage_algo_config(algo, {"warmup_steps": 0}, "s2r") == {"name": "grpo", "lr": 1e-4, "warmup_steps": 0}
    assert stage_algo_config(algo, None, "s2r") == algo and algo["warmup_steps"] == 10  # a copy: algo unchanged
    with pytest.raises(KeyError, match="s2r.algo.gamma: not a key of algo='grpo'"):
        stage_algo_config(algo, {"gamma": 0.9}, "s2r")
    with pytest.raises(KeyError, match="s2r.algo.name: a stage cannot change the algorithm"):
        stage_algo_config(algo, {"name": "ppo"}, "s2r")


def test_a_stage_gets_its_own_algorithm_config():
    """algorithm(run, "s2r") reads s2r.algo; the other RL stages keep algo."""
    from types import SimpleNamespace

    from dreamgym_pl.stages.policy import algorithm
    from tests.conftest import compose

    run = SimpleNamespace(cfg=compose(["conf=webshop_s2r", "+s2r.algo.warmup_steps=0", "+s2r.algo.lr=2e-4"]))
    s2r, rl = algorithm(run, "s2r").cfg, algorithm(run, "rl").cfg
    assert (s2r.warmup_steps, s2r.lr, rl.warmup_steps, rl.lr) == (0, 2e-4, 10, 1e-4)
    assert algorithm(run).cfg == rl


def test_real_rl_trains_s2r_with_its_own_algorithm(monkeypatch):
    """The s2r stage's module is built with s2r.algo's settings; the rl stage's with algo's."""
    from types import SimpleNamespace

    import dreamgym_pl.stages.rl as rl_stage
    from tests.conftest import compose

    class Built(Exception):
        pass

    def capture(run, model, tok, algo, state):
        raise Built(algo.cfg)

    monkeypatch.setattr(rl_stage, "load_rl_checkpoint", lambda run, stage: (None, None, None))
    monkeypatch.setattr(rl_stage, "stage_replay", lambda run, stage, vdir: None)
    monkeypatch.setattr(rl_stage, "OnlineReplay", lambda *a: None)
    monkeypatch.setattr(rl_stage, "rl_module", capture)
    run = SimpleNamespace(cfg=compose(["conf=webshop_s2r", "+s2r.algo.warmup_steps=0", "+s2r.algo.lr=2e-4"]),
                          env=SimpleNamespace(explain=None))
    for stage, want in (("s2r", (0, 2e-4)), ("rl", (10, 1e-4))):
        with pytest.raises(Built) as built:
            rl_stage.real_rl(run, stage, 600, 8, 10)
        assert (built.value.args[0].warmup_steps, built.value.args[0].lr) == want


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


def test_grpo_episode_step_weight():
    """Task a: a 1-step success and a 3-step failure (advantages +0.5 / -0.5); mean length 2, so the success's
    step weighs 2 and each failure step 2/3: both episodes weigh 1 in sum (step_weight=episode)."""
    algo = GRPO(GRPOConfig(reward="success", invalid_penalty=0.0, normalize_std=False, step_weight="episode"))
    trajs = [_traj("a", [1.0], [False], True), _traj("a", [0.0] * 3, [False] * 3, False)]
    per = [[StepSample([1], [2]) for _ in t.transitions] for t in trajs]
    out = algo.with_advantages(trajs, per, None, 0)
    assert [s.scalars["adv"] for s in out] == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    assert sum(s.scalars["adv"] for s in out) == pytest.approx(0.0)  # no net push on what all steps share


def test_grpo_self_critical_baseline():
    """algo.baseline=greedy: each return minus its task's greedy return (task a: greedy failed, so the success gets
    +1 and the failure 0; task b: greedy succeeded, so both failures get -1; one invalid action costs 0.1)."""
    algo = GRPO(GRPOConfig(reward="success", invalid_penalty=0.1, baseline="greedy"))
    trajs = [_traj("a", [1.0], [False], True), _traj("a", [0.0], [False], False),
             _traj("b", [0.0, 0.0], [True, False], False), _traj("b", [0.0], [False], False)]
    per = [[StepSample([1], [2]) for _ in t.transitions] for t in trajs]
    out = algo.with_advantages(trajs, per, None, 0, baselines={"a": 0.0, "b": 1.0})
    assert [s.scalars["adv"] for s in out] == pytest.approx([1.0, 0.0, -1.1, -1.1, -1.0])
    with pytest.raises(ValueError, match="greedy"):
        algo.with_advantages(trajs, per, None, 0)
    with pytest.raises(KeyError, match="no greedy baseline"):
        algo.with_advantages(trajs, per, None, 0, baselines={"a": 0.0})
    with pytest.raises(ValueError, match="algo.baseline"):
        GRPO(GRPOConfig(baseline="mean")).with_advantages(trajs, per, None, 0)


def test_grpo_group_greedy_is_the_group_mean_over_every_member():
    """algo.baseline=group_greedy: the RL loop passes the greedy episode as one more member of its group; the
    advantages are the group-mean ones over all G + 1 (task a: returns 1, 0 and a greedy 0 -> mean 1/3)."""
    algo = GRPO(GRPOConfig(reward="success", invalid_penalty=0.0, baseline="group_greedy"))
    trajs = [_traj("a", [1.0], [False], True), _traj("a", [0.0], [False], False), _traj("a", [0.0], [False], False)]
    per = [[StepSample([1], [2]) for _ in t.transitions] for t in trajs]
    out = algo.with_advantages(trajs, per, None, 0)
    assert [s.scalars["adv"] for s in out] == pytest.approx([2 / 3, -1 / 3, -1 / 3])
