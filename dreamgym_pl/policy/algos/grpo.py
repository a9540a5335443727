"""GRPO (verl-agent style): every step of an episode carries its episode's group-relative return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from dreamgym_pl.core import Trajectory
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.algos.base import RLAlgorithm, RLConfig, trajectory_return
from dreamgym_pl.policy.samples import StepSample


@dataclass
class GRPOConfig(RLConfig):
    name: str = "grpo"
    adv_eps: float = 1.0e-6       # added to the group std
    normalize_std: bool = False   # true: divide by the group std (verl-agent); false: subtract the group mean only
    step_weight: str = "step"     # step: every step carries its episode's advantage (verl-agent); episode: scaled by
                                  # mean length / the episode's length, so that each episode counts once
    baseline: str = "group"       # group: the group's mean return (GRPO); greedy: the return of one extra episode of the
                                  # task decoded greedily (self-critical, losses.baseline_advantages); group_greedy:
                                  # that greedy episode joins its group (G + 1 members, group mean, all trained)


class GRPO(RLAlgorithm):
    name = "grpo"
    config_cls = GRPOConfig

    def with_advantages(self, trajs: Sequence[Trajectory], per_traj: list[list[StepSample]], module: Any,
                        pad_id: int, baselines: dict[str, float] | None = None) -> list[StepSample]:
        """`baselines` (task id -> the greedy episode's return) is required with `baseline: greedy`."""
        cfg: GRPOConfig = self.cfg  # type: ignore[assignment]
        rets = [trajectory_return(t, cfg) for t in trajs]
        ids = [t.task.task_id for t in trajs]
        if cfg.baseline == "greedy":
            if baselines is None:
                raise ValueError("algo.baseline=greedy needs the greedy episodes' returns (the RL loop plays them)")
            adv = losses.baseline_advantages(rets, ids, baselines)
        elif cfg.baseline in ("group", "group_greedy"):  # group_greedy: the RL loop adds the greedy episodes to trajs
            adv = losses.group_advantages(rets, ids, cfg.adv_eps, cfg.normalize_std)
        else:
            raise ValueError(f"algo.baseline must be group, greedy or group_greedy, got {cfg.baseline!r}")
        if cfg.step_weight == "episode":
            adv = [a * w for a, w in zip(adv, losses.episode_weights([len(ss) for ss in per_traj]))]
        elif cfg.step_weight != "step":
            raise ValueError(f"algo.step_weight must be step or episode, got {cfg.step_weight!r}")
        for i, ss in enumerate(per_traj):
            for s in ss:
                s.scalars = {"adv": adv[i]}
        return [s for ss in per_traj for s in ss]
