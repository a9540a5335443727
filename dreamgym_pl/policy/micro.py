"""Length-sorted micro-batches of one right-padded batch (`micro_batches`: sft, its copy warm start, the experience
model, token-mean RL objectives).

`collate` pads every row of a batch to its longest, and a forward/backward pass pays for the padding (copy warm start
~43% of its cells, SFT ~33%, experience model ~23%, README "Where `make run`'s time goes"). Sorting one batch's rows
by length and cutting them into N contiguous parts, each cut to its own longest row, pays for fewer cells; the
loss stays the batch's: the mean over all its target tokens = (sum of each part's target log-prob sums) / (the batch's
target tokens), so the gradient is the whole batch's up to rounding. Which batch a sample lands in does not
change: the samples of a step stay a random draw. Any loss that is a mean over
the batch's target tokens splits the same way (`token_weighted`: sft, GRPO's token-mean surrogate, KL and entropy);
per-row values without gradients (the RL stages' old and reference log-probs) split by `rowwise`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch


def row_lengths(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Tokens of each row of a right-padded batch (ones, then zeros, in `attention_mask`); any other padding raises."""
    attn = batch["attention_mask"]
    if attn.shape[1] > 1 and not bool((attn[:, 1:] <= attn[:, :-1]).all()):
        raise ValueError("micro_batches needs right-padded batches (collate's); this one is padded otherwise")
    return attn.sum(1)


def length_groups(lengths: Sequence[int], parts: int) -> list[list[int]]:
    """Positions 0..n-1 sorted by `lengths` (ties in position order) and cut into `parts` contiguous groups of
    ceil(n / parts) (fewer groups when n < parts): the grouping of every split here and of the outcome model's."""
    if parts < 1:
        raise ValueError(f"micro_batches must be >= 1, got {parts}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    size = max(1, -(-len(order) // parts))
    return [order[k:k + size] for k in range(0, len(order), size)]


def row_groups(batch: dict[str, torch.Tensor], parts: int) -> list[list[int]]:
    """`length_groups` of the batch's rows by their tokens (`row_lengths`)."""
    return length_groups(row_lengths(batch).tolist(), parts)


def split_rows(batch: dict[str, torch.Tensor], parts: int) -> list[dict[str, torch.Tensor]]:
    """The batch's rows in `row_groups` (sorted by length, ties in row order, `parts` contiguous groups of
    ceil(B / parts) rows, fewer when B < parts), each group's tensors indexed by its rows and its [., T] and
    [., T-1] tensors cut to the group's longest row (T_k) and T_k - 1 columns. Other tensors are indexed by row
    when their first dimension is B, else kept whole."""
    lengths = row_lengths(batch)
    B, T = batch["input_ids"].shape
    out = []
    for group in length_groups(lengths.tolist(), parts):
        rows = torch.tensor(group, dtype=torch.long, device=lengths.device)
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


def token_weighted(batch: dict[str, torch.Tensor], parts: int,
                   part_loss: Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, dict[str, Any]]]
                   ) -> tuple[torch.Tensor, dict[str, Any]]:
    """(loss, logs) of a loss whose value and logs are means over the batch's target tokens (`loss_mask`):
    `part_loss(batch)` itself for parts <= 1, else the sum over `split_rows(batch, parts)` of each part's (loss, logs)
    weighted by its share of the batch's target tokens (the whole batch's token mean up to rounding; one graph, so
    one backward pass gives the accumulated gradient). A part without target tokens weighs 0."""
    if parts <= 1:
        return part_loss(batch)
    total = batch["loss_mask"].sum().clamp_min(1.0)
    loss: Any = 0.0
    logs: dict[str, Any] = {}
    for p in split_rows(batch, parts):
        w = p["loss_mask"].sum() / total
        part, part_logs = part_loss(p)
        loss = loss + w * part
        for k, v in part_logs.items():
            logs[k] = logs.get(k, 0.0) + w * v
    return loss, logs


@torch.no_grad()
def rowwise(batch: dict[str, torch.Tensor], parts: int,
            fn: Callable[[dict[str, torch.Tensor]], torch.Tensor]) -> torch.Tensor:
    """`fn(batch)` ([B, T-1] per-token values of each row, e.g. token log-probs) computed over `split_rows(batch,
    parts)` and put back in the batch's row order and width (0 past each part's width); `fn(batch)` for parts <= 1."""
    if parts <= 1:
        return fn(batch)
    B, T = batch["input_ids"].shape
    out = None
    for rows, p in zip(row_groups(batch, parts), split_rows(batch, parts)):
        v = fn(p)
        if out is None:
            out = v.new_zeros((B, T - 1) + tuple(v.shape[2:]))
        out[torch.tensor(rows, dtype=torch.long, device=v.device), :v.shape[1]] = v
    return out
