"""Pure loss and advantage functions for policy training (tested against hand-computed values).

Shapes: `[B, T]` token tensors with a float `mask` (1 on response tokens, 0 on prompt and padding).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F


def group_advantages(rewards: Sequence[float], groups: Sequence[object], eps: float = 1e-6,
                     normalize_std: bool = True) -> list[float]:
    """GRPO: (r - mean_group) / (std_group + eps), unbiased std; a group of one gets mean 0 and std 1.
    With `normalize_std=False` only the group mean is subtracted (Dr. GRPO style)."""
    by_group: dict[object, list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    adv = [0.0] * len(rewards)
    for idx in by_group.values():
        r = torch.tensor([float(rewards[i]) for i in idx], dtype=torch.float64)
        if len(idx) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = float(r.mean()), float(r.std(unbiased=True))
        for i in idx:
            a = float(rewards[i]) - mean
            adv[i] = a / (std + eps) if normalize_std else a
    return adv


def gae(rewards: Sequence[float], values: Sequence[float], gamma: float = 1.0, lam: float = 0.95,
        last_value: float = 0.0) -> tuple[list[float], list[float]]:
    """Generalised advantage estimation over one trajectory; returns (advantages, returns = adv + values).
    The trajectory is taken as terminated: the value after the last step is `last_value` (0)."""
    n = len(rewards)
    adv = [0.0] * n
    nxt_v, running = last_value, 0.0
    for t in reversed(range(n)):
        delta = rewards[t] + gamma * nxt_v - values[t]
        running = delta + gamma * lam * running
        adv[t] = running
        nxt_v = values[t]
    return adv, [a + v for a, v in zip(adv, values)]


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp_min(1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp_min(1.0)


def aggregate(loss_tokens: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """token-mean: mean over all response tokens of the batch; seq-mean: mean over sequences of each
    sequence's token mean."""
    if mode == "token-mean":
        return masked_mean(loss_tokens, mask)
    if mode == "seq-mean":
        return masked_mean(loss_tokens, mask, dim=-1).mean()
    raise ValueError(f"unknown aggregation {mode!r} (token-mean, seq-mean)")


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                      clip_low: float = 0.2, clip_high: float = 0.2, dual_clip: float | None = 3.0,
                      agg: str = "token-mean") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped policy loss with separate low/high clip and optional dual clip (for adv < 0).
    `adv` is [B, T] or [B] (broadcast over tokens)."""
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1).expand_as(logp)
    ratio = torch.exp(logp - old_logp)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(l1, l2)
    if dual_clip is not None:
        l3 = -adv * dual_clip
        loss = torch.where(adv < 0, torch.minimum(loss, l3), loss)
    clipped = (l2 > l1).float()
    return aggregate(loss, mask, agg), {"clip_frac": masked_mean(clipped, mask), "ratio": masked_mean(ratio, mask)}


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3", clamp: float = 10.0) -> torch.Tensor:
    """Per-token KL(pi || ref) estimators: k1 = logp - ref; k3 ("low_var_kl") = exp(ref-logp) - (ref-logp) - 1,
    clamped to +-clamp."""
    diff = ref_logp - logp
    if kind == "k1":
        return -diff
    if kind == "k3":
        return torch.clamp(torch.exp(diff) - diff - 1.0, min=-clamp, max=clamp)
    raise ValueError(f"unknown KL estimator {kind!r} (k1, k3)")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None = 0.2) -> torch.Tensor:
    """PPO clipped value loss: 0.5 * max((v - R)^2, (clip(v, v_old +- c) - R)^2), mean over samples."""
    l1 = (values - returns) ** 2
    if clip is None:
        return 0.5 * l1.mean()
    v_clip = old_values + torch.clamp(values - old_values, -clip, clip)
    l2 = (v_clip - returns) ** 2
    return 0.5 * torch.maximum(l1, l2).mean()


def dpo_loss(chosen_logp: torch.Tensor, rejected_logp: torch.Tensor, ref_chosen_logp: torch.Tensor,
             ref_rejected_logp: torch.Tensor, beta: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """DPO: -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), mean; also the preference accuracy."""
    margin = beta * ((chosen_logp - ref_chosen_logp) - (rejected_logp - ref_rejected_logp))
    return -F.logsigmoid(margin).mean(), (margin > 0).float().mean()


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log p(input_ids[:, t] | < t) for t >= 1, aligned as [B, T-1] (position t-1 predicts token t)."""
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
