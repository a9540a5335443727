"""Batches of the supervised stages (sft, experience): a DataLoader shuffled anew each pass from a seeded
generator, and the padding a batch order costs (`collate` pads every sample of a batch to the batch's longest; a
forward pass pays for the padding: experiments/bench_batching.py measures it, policy/micro.py removes most of it).
"""

from __future__ import annotations

import random
from typing import Sequence

import torch


def shuffled_order(n: int, rng: random.Random) -> list[int]:
    """`range(n)` in the random order `rng.shuffle` gives it."""
    order = list(range(n))
    rng.shuffle(order)
    return order


def sample_lengths(samples: Sequence) -> list[int]:
    """Tokens of each StepSample as `collate` lays it out (prompt + response)."""
    return [len(s.prompt_ids) + len(s.response_ids) for s in samples]


def padding_share(lengths: Sequence[int], order: Sequence[int], batch_size: int) -> float:
    """Share of the padded tokens that are padding when `order` is cut into batches of `batch_size` and each batch
    is padded to its longest sample."""
    padded = real = 0
    for j in range(0, len(order), batch_size):
        batch = [lengths[i] for i in order[j:j + batch_size]]
        padded += len(batch) * max(batch)
        real += sum(batch)
    return 1.0 - real / padded if padded else 0.0


def shuffled_loader(samples: Sequence, batch_size: int, pad_id: int, generator: torch.Generator):
    """A DataLoader of `samples` (StepSamples) collated with `pad_id`, in a new random order each pass drawn from
    `generator`."""
    from torch.utils.data import DataLoader

    from dreamgym_pl.policy.samples import collate

    coll = lambda b: collate(b, pad_id)  # noqa: E731
    return DataLoader(samples, batch_size=batch_size, shuffle=True, generator=generator, collate_fn=coll)
