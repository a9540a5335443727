"""DPO, the offline baseline: (successful, failed) trajectories of the same goal; every step of a side adds
to its sequence log-prob."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Sequence

import torch
from torch.utils.data import DataLoader

from dreamgym_pl.core import Trajectory
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.algos.base import Objective
from dreamgym_pl.policy.samples import StepSample, collate, trajectory_samples
from dreamgym_pl.rollout.prompts import PromptConfig


class DPO(Objective):
    name = "dpo"
    needs_reference = True

    def __init__(self, beta: float = 0.1):
        self.beta = beta

    def loss(self, module: Any, batch: dict[str, torch.Tensor], out: Any,
             logp: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        seq = (logp * batch["loss_mask"]).sum(-1)
        n_pairs = int(batch["pair"].max().item()) + 1
        side = batch["side"].long()
        pair = batch["pair"].long()
        agg = torch.zeros(n_pairs, 2, dtype=seq.dtype, device=seq.device).index_put((pair, side), seq, accumulate=True)
        ref = torch.zeros(n_pairs, 2, dtype=seq.dtype, device=seq.device)
        ref = ref.index_put((pair, side), batch["ref_seq_logp"].to(seq.dtype), accumulate=True)
        loss, acc = losses.dpo_loss(agg[:, 1], agg[:, 0], ref[:, 1], ref[:, 0], self.beta)
        return loss, {"losses/dpo": loss.detach(), "dpo/accuracy": acc}


def dpo_pairs(trajs: Sequence[Trajectory], max_pairs: int, seed: int = 0) -> list[tuple[Trajectory, Trajectory]]:
    """(successful, failed) trajectory pairs of the same goal."""
    by_task: dict[str, dict[str, list[Trajectory]]] = defaultdict(lambda: {"ok": [], "bad": []})
    for t in trajs:
        by_task[t.task.task_id]["ok" if t.success else "bad"].append(t)
    pairs = [(c, r) for d in by_task.values() for c in d["ok"] for r in d["bad"]]
    random.Random(seed).shuffle(pairs)
    return pairs[:max_pairs]


def dpo_loader(pairs: Sequence[tuple[Trajectory, Trajectory]], module: Any, prompt_cfg: PromptConfig,
               pairs_per_batch: int, seed: int = 0) -> DataLoader:
    """Batches of whole pairs: every step of both trajectories, tagged with pair index and side, with the
    reference policy's summed response log-prob per step precomputed."""
    tok = module.tokenizer
    batches = []
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    for start in range(0, len(order), pairs_per_batch):
        samples: list[StepSample] = []
        for j, pi in enumerate(order[start:start + pairs_per_batch]):
            for side, traj in ((1, pairs[pi][0]), (0, pairs[pi][1])):
                for s in trajectory_samples(traj, tok, prompt_cfg):
                    s.scalars = {"pair": j, "side": side}
                    samples.append(s)
        b = collate(samples, tok.pad_token_id)
        ref = module.logprobs(b, reference=True)
        b["ref_seq_logp"] = (ref * b["loss_mask"]).sum(-1)
        b["pair"] = b["pair"].long()
        b["side"] = b["side"].long()
        batches.append(b)
    return DataLoader(batches, batch_size=None, shuffle=False)
