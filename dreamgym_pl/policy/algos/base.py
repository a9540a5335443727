"""What every policy objective provides, and the shared part of the RL algorithms.

An objective (sft, dpo, grpo, ppo) gives `PolicyModule` its loss and says what it needs (a frozen reference
model, a value head, hidden states). An RL algorithm also turns a batch of trajectories into per-step
training samples with advantages, and values tasks for the curriculum. Each has a config dataclass in
`dreamgym_pl/algo_config.py`, the one declaration of its keys (defaults, rules, comments; the Hydra `algo` options).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from dreamgym_pl.algo_config import RLConfig
from dreamgym_pl.core import Trajectory
from dreamgym_pl.curriculum import group_variances
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.samples import StepSample


class Objective:
    """A policy loss. `loss(module, batch, out, logp)` gets the model output and the token log-probs of the
    batch under the trained model and returns (loss, logs)."""

    name = "objective"
    needs_reference = False   # a frozen copy of the starting policy (under LoRA: of its starting adapter)
    needs_value_head = False
    needs_hidden = False      # the forward pass returns hidden states (value head)
    critic_lr = 0.0
    logit_temperature = 1.0   # the loss scores softmax(logits / this): the distribution the samples came from
    token_mean = False        # loss and logs are means over the batch's target tokens (loss_mask), so PolicyModule
                              # may compute them over length-sorted micro-batches (policy/micro.py)

    def loss(self, module: Any, batch: dict[str, torch.Tensor], out: Any,
             logp: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        raise NotImplementedError


def episode_outcome(traj: Trajectory, reward: str) -> float:
    """The episode's outcome reward: WebShop-style graded score or 1/0 success."""
    return traj.final_reward if reward == "score" else float(traj.success)


def trajectory_return(traj: Trajectory, cfg: RLConfig) -> float:
    """The outcome minus `invalid_penalty` per invalid action."""
    n_invalid = sum(1 for s in traj.transitions if s.info.get("invalid"))
    return episode_outcome(traj, cfg.reward) - cfg.invalid_penalty * n_invalid


def step_rewards(traj: Trajectory, cfg: RLConfig) -> list[float]:
    """Per-step rewards: the outcome at the last step, the invalid-action penalty where it occurred."""
    rs = [-cfg.invalid_penalty if s.info.get("invalid") else 0.0 for s in traj.transitions]
    if rs:
        rs[-1] += episode_outcome(traj, cfg.reward)
    return rs


class RLAlgorithm(Objective):
    """The clipped policy-gradient loss with entropy bonus and KL to the reference; subclasses add how
    advantages are computed (and a value loss)."""

    config_cls: type[RLConfig] = RLConfig
    needs_task_embedder = False  # task_values groups tasks by instruction embeddings (no groups of its own)

    def __init__(self, cfg: RLConfig):
        self.cfg = cfg

    @property
    def needs_reference(self) -> bool:  # type: ignore[override]
        return self.cfg.kl_coef > 0

    @property
    def token_mean(self) -> bool:  # type: ignore[override]
        """The clipped surrogate, KL and entropy are each a mean over the batch's tokens under agg token-mean; a
        value loss (a mean over samples) is not."""
        return self.cfg.agg == "token-mean" and not self.needs_value_head

    @property
    def logit_temperature(self) -> float:  # type: ignore[override]
        """Rollouts sample softmax(logits / algo.temperature); the ratio, KL and entropy score that same
        distribution (as verl does), so the first epoch is on-policy at any temperature."""
        return self.cfg.temperature if self.cfg.temperature > 0 else 1.0

    def with_advantages(self, trajs: Sequence[Trajectory], per_traj: list[list[StepSample]], module: Any,
                        pad_id: int) -> list[StepSample]:
        """The training samples of an iteration (every step of every trajectory) with their scalars set."""
        raise NotImplementedError

    def task_values(self, trajs: Sequence[Trajectory], embed: Callable[[list[str]], Any] | None,
                    num_clusters: int) -> dict[str, float]:
        """Curriculum value of each task of the iteration: the reward variance of its group (paper Eq. 6)."""
        return group_variances([t.task.task_id for t in trajs], [t.final_reward for t in trajs])

    def loss(self, module: Any, batch: dict[str, torch.Tensor], out: Any,
             logp: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        a, mask = self.cfg, batch["loss_mask"]
        pg, stats = losses.clipped_surrogate(logp, batch["old_logp"], batch["adv"], mask, a.clip_low, a.clip_high,
                                             a.dual_clip, a.agg)
        loss = pg
        logs: dict[str, Any] = {"losses/policy": pg.detach(), "losses/clip_frac": stats["clip_frac"]}
        if a.entropy_coef > 0:
            logits, t = out.logits[:, :-1], self.logit_temperature
            ent = losses.masked_mean(losses.entropy_from_logits(logits if t == 1.0 else logits / t), mask)
            loss = loss - a.entropy_coef * ent
            logs["losses/entropy"] = ent.detach()
        if a.kl_coef > 0 and "ref_logp" in batch:
            # off the targets (padding) the reference may hold anything (0 past a micro-batch's width): k3's exp would
            # overflow there and its backward give 0 * inf = NaN although the mask drops the value
            ref = torch.where(mask > 0, batch["ref_logp"], logp.detach())
            kl = losses.masked_mean(losses.kl_penalty(logp, ref, a.kl_kind), mask)
            loss = loss + a.kl_coef * kl
            logs["losses/kl"] = kl.detach()
        return loss, logs
