"""Length-sorted micro-batches of one right-padded batch (`micro_batches`: sft, the copy warm starts, the experience
model).

`collate` pads every row of a batch to its longest, and a forward/backward pass pays for the padding (copy warm start
~43% of its cells, SFT ~33%, experience model ~23%, README "Where `make run`'s time goes"). Sorting one batch's rows
by length and cutting them into N contiguous parts, each cut to its own longest row, pays for fewer cells; the
loss stays the batch's: the mean over all its target tokens = (sum of each part's target log-prob sums) / (the batch's
target tokens), so the gradient is the whole batch's up to rounding. Unlike `group_batches` (batching.py), which
batch a sample lands in does not change: the samples of a step stay a random draw.
"""

from __future__ import annotations

from typing import Callable

import torch


def row_lengths(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Tokens of each row of a right-padded batch (ones, then zeros, in `attention_mask`); any other padding raises."""
    attn = batch["attention_mask"]
    if attn.shape[1] > 1 and not bool((attn[:, 1:] <= attn[:, :-1]).all()):
        raise ValueError("micro_batches needs right-padded batches (collate's); this one is padded otherwise")
    return attn.sum(1)


def split_rows(batch: dict[str, torch.Tensor], parts: int) -> list[dict[str, torch.Tensor]]:
    """The batch's rows sorted by length (ties in row order) and cut into `parts` contiguous groups of
    ceil(B / parts) rows (fewer groups when B < parts), each group's tensors indexed by its rows and its [., T] and
    [., T-1] tensors cut to the group's longest row (T_k) and T_k - 1 columns. Other tensors are indexed by row
    when their first dimension is B, else kept whole."""
    if parts < 1:
        raise ValueError(f"micro_batches must be >= 1, got {parts}")
    lengths = row_lengths(batch)
    B, T = batch["input_ids"].shape
    order = torch.sort(lengths, stable=True).indices
    size = -(-B // parts)
    out = []
    for start in range(0, B, size):
        rows = order[start:start + size]
        t = max(1, int(lengths[rows].max()))
        part = {}
        for k, v in batch.items():
            if not isinstance(v, torch.Tensor) or v.dim() == 0 or v.shape[0] != B:
                part[k] = v
                continue
            v = v[rows]
            if v.dim() >= 2 and v.shape[1] == T:
                v = v[:, :t]
            elif v.dim() >= 2 and v.shape[1] == T - 1:
                v = v[:, :max(0, t - 1)]
            part[k] = v
        out.append(part)
    return out


def token_nll(batch: dict[str, torch.Tensor], logprobs: Callable[[dict[str, torch.Tensor]], torch.Tensor],
              parts: int = 1) -> torch.Tensor:
    """Mean negative log-probability of the batch's target tokens (`loss_mask`), `logprobs(batch)` giving the token
    log-probs [B, T-1] of a batch: in one pass (parts <= 1) or summed over `split_rows(batch, parts)` and divided by
    the batch's target tokens (one graph; one backward pass gives the accumulated gradient)."""
    total = batch["loss_mask"].sum().clamp_min(1.0)
    if parts <= 1:
        return -(logprobs(batch) * batch["loss_mask"]).sum() / total
    return -sum((logprobs(p) * p["loss_mask"]).sum() for p in split_rows(batch, parts)) / total
