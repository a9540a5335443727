"""PPO: a value head on the prompt's last token, GAE over the steps of an episode, whitened advantages.
PPO has no groups: the curriculum groups tasks by k-means over their instruction embeddings."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from dreamgym_pl.algo_config import PPOConfig
from dreamgym_pl.core import Trajectory
from dreamgym_pl.curriculum import cluster_groups, group_variances
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.algos.base import RLAlgorithm, step_rewards
from dreamgym_pl.policy.samples import StepSample, collate


class PPO(RLAlgorithm):
    name = "ppo"
    config_cls = PPOConfig
    needs_value_head = True
    needs_hidden = True
    needs_task_embedder = True

    @property
    def critic_lr(self) -> float:  # type: ignore[override]
        return self.cfg.critic_lr  # type: ignore[attr-defined]

    def with_advantages(self, trajs: Sequence[Trajectory], per_traj: list[list[StepSample]], module: Any,
                        pad_id: int) -> list[StepSample]:
        cfg: PPOConfig = self.cfg  # type: ignore[assignment]
        flat = [s for ss in per_traj for s in ss]
        vals: list[float] = []
        for i in range(0, len(flat), cfg.mini_batch_size):
            vals.extend(module.values(collate(flat[i:i + cfg.mini_batch_size], pad_id)).tolist())
        k = 0
        advs: list[float] = []
        rets: list[float] = []
        for t, ss in zip(trajs, per_traj):
            a, r = losses.gae(step_rewards(t, cfg), vals[k:k + len(ss)], cfg.gamma, cfg.gae_lambda)
            advs += a
            rets += r
            k += len(ss)
        at = torch.tensor(advs)
        at = (at - at.mean()) / (at.std() + 1e-8) if len(advs) > 1 else at
        for s, a, r, v in zip(flat, at.tolist(), rets, vals):
            s.scalars = {"adv": a, "returns": r, "old_values": v}
        return flat

    def task_values(self, trajs: Sequence[Trajectory], embed: Callable[[list[str]], Any] | None,
                    num_clusters: int) -> dict[str, float]:
        uniq = list(dict.fromkeys(t.task.task_id for t in trajs))
        instr = {t.task.task_id: t.task.instruction for t in trajs}
        labels = cluster_groups(embed([instr[u] for u in uniq]), num_clusters) if embed else [0] * len(uniq)
        lab = dict(zip(uniq, labels))
        cv = group_variances([str(lab[t.task.task_id]) for t in trajs], [t.final_reward for t in trajs])
        return {u: cv[str(lab[u])] for u in uniq}

    def loss(self, module: Any, batch: dict[str, torch.Tensor], out: Any,
             logp: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        cfg: PPOConfig = self.cfg  # type: ignore[assignment]
        loss, logs = super().loss(module, batch, out, logp)
        v = module.values_from_hidden(out.hidden_states[-1], batch["prompt_last"])
        vl = losses.value_loss(v, batch["old_values"], batch["returns"], cfg.vf_clip)
        logs["losses/value"] = vl.detach()
        return loss + cfg.vf_coef * vl, logs
