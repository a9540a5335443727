"""GRPO (verl-agent style): every step of an episode carries its episode's group-relative return."""

from __future__ import annotations

from typing import Any, Sequence

from dreamgym_pl.algo_config import GRPOConfig
from dreamgym_pl.core import Trajectory
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.algos.base import RLAlgorithm, trajectory_return
from dreamgym_pl.policy.samples import StepSample


class GRPO(RLAlgorithm):
    name = "grpo"
    config_cls = GRPOConfig

    def with_advantages(self, trajs: Sequence[Trajectory], per_traj: list[list[StepSample]], module: Any,
                        pad_id: int) -> list[StepSample]:
        cfg: GRPOConfig = self.cfg  # type: ignore[assignment]
        rets = [trajectory_return(t, cfg) for t in trajs]
        adv = losses.group_advantages(rets, [t.task.task_id for t in trajs], cfg.adv_eps, cfg.normalize_std)
        for i, ss in enumerate(per_traj):
            for s in ss:
                s.scalars = {"adv": adv[i]}
        return [s for ss in per_traj for s in ss]
