"""SFT (behaviour cloning): token cross-entropy on the action tokens of successful offline steps."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.utils.data import DataLoader

from dreamgym_pl.core import Trajectory
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.algos.base import Objective
from dreamgym_pl.policy.samples import StepSample, collate, trajectory_samples
from dreamgym_pl.rollout.prompts import PromptConfig


class SFT(Objective):
    name = "sft"

    def loss(self, module: Any, batch: dict[str, torch.Tensor], out: Any,
             logp: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        loss = -losses.masked_mean(logp, batch["loss_mask"])
        return loss, {"losses/sft": loss.detach()}


def sft_loader(trajs: Sequence[Trajectory], tokenizer: Any, prompt_cfg: PromptConfig, batch_size: int,
               seed: int = 0, extra: Sequence[StepSample] = ()) -> DataLoader:
    """Every step of `trajs` as a (prompt, action) sample, plus `extra` samples (e.g. copy examples), shuffled."""
    samples = [s for i, t in enumerate(trajs) for s in trajectory_samples(t, tokenizer, prompt_cfg, i)]
    if not samples:
        raise ValueError("sft: no training samples (no successful offline trajectories of the chosen source)")
    samples += list(extra)
    g = torch.Generator().manual_seed(seed)
    return DataLoader(samples, batch_size=batch_size, shuffle=True, generator=g,
                      collate_fn=lambda b: collate(b, tokenizer.pad_token_id))
