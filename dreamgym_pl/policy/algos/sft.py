"""SFT (behaviour cloning): token cross-entropy on the action tokens of the cloned offline steps
(stages/sft.py chooses them: sft.source, sft.min_score)."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.utils.data import DataLoader

from dreamgym_pl.core import Trajectory
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.algos.base import Objective
from dreamgym_pl.policy.batching import shuffled_loader
from dreamgym_pl.policy.samples import StepSample, trajectory_samples
from dreamgym_pl.rollout.prompts import PromptConfig


class SFT(Objective):
    name = "sft"
    token_mean = True  # a mean over the batch's target tokens: PolicyModule may split the batch (policy/micro.py)

    def loss(self, module: Any, batch: dict[str, torch.Tensor], out: Any,
             logp: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        loss = -losses.masked_mean(logp, batch["loss_mask"])
        return loss, {"losses/sft": loss.detach()}


def sft_loader(trajs: Sequence[Trajectory], tokenizer: Any, prompt_cfg: PromptConfig, batch_size: int,
               seed: int = 0, extra: Sequence[StepSample] = ()) -> DataLoader:
    """Every step of `trajs` as a (prompt, action) sample, plus `extra` samples (e.g. copy examples), shuffled."""
    samples = [s for i, t in enumerate(trajs) for s in trajectory_samples(t, tokenizer, prompt_cfg, i)]
    if not samples:
        raise ValueError("sft: no training samples (no offline trajectories of sft.source pass sft.min_score, "
                         "or are successful when it is null)")
    samples += list(extra)
    return shuffled_loader(samples, batch_size, tokenizer.pad_token_id, torch.Generator().manual_seed(seed))
