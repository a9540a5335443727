"""Length-grouped batch order for the supervised stages (sft, experience; `group_batches`, off by default).

`collate` pads every sample of a batch to the batch's longest, and a forward pass pays for the padding. In a random
order short and long samples share batches: the SFT data mix copy examples (8-100 tokens) with demonstrations (up to
~130), and the experience data mix search pages with results pages and long purchase targets. Grouping samples of
similar length into the same batch, as Hugging Face's `group_by_length` does, removes most of the padding without
changing what an epoch holds: a random permutation is cut into groups of `group_batches` batches, each group is
sorted by length and cut into batches, and the batches of a group are shuffled. Which samples share a batch changes
(so a run's numbers change as with another seed); every sample is still seen once per epoch.
"""

from __future__ import annotations

import random
from typing import Iterator, Sequence

import torch
from torch.utils.data import Sampler


def length_grouped_order(lengths: Sequence[int], batch_size: int, group_batches: int, rng: random.Random) -> list[int]:
    """A permutation of `range(len(lengths))` whose consecutive `batch_size` chunks hold samples of similar length:
    a random permutation, cut into groups of `group_batches * batch_size`, each group sorted by length (ties in the
    permutation's order) and cut into batches, the batches of each group in random order. `group_batches` <= 0:
    the random permutation itself."""
    if batch_size < 1:
        raise ValueError(f"length_grouped_order: batch_size must be >= 1, got {batch_size}")
    order = list(range(len(lengths)))
    rng.shuffle(order)
    if group_batches <= 0:
        return order
    size = group_batches * batch_size
    out: list[int] = []
    for start in range(0, len(order), size):
        group = sorted(order[start:start + size], key=lambda i: lengths[i])
        batches = [group[j:j + batch_size] for j in range(0, len(group), batch_size)]
        # a group's short last batch stays last, so that only the epoch's final batch can be short
        full, rest = (batches[:-1], batches[-1:]) if len(batches[-1]) < batch_size else (batches, [])
        rng.shuffle(full)
        out += [i for b in full + rest for i in b]
    return out


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


class LengthGroupedSampler(Sampler[int]):
    """Sample indices in `length_grouped_order`, a new order each pass, drawn from `generator` (as a DataLoader's
    shuffle draws from its generator, so that a resumed stage replays the same passes). Give the DataLoader the
    same `batch_size`."""

    def __init__(self, lengths: Sequence[int], batch_size: int, group_batches: int, generator: torch.Generator):
        self.lengths, self.batch_size, self.group_batches, self.generator = list(lengths), batch_size, group_batches, generator

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        return iter(length_grouped_order(self.lengths, self.batch_size, self.group_batches, random.Random(seed)))


def shuffled_loader(samples: Sequence, batch_size: int, pad_id: int, generator: torch.Generator,
                    group_batches: int = 0):
    """A DataLoader of `samples` (StepSamples) collated with `pad_id`, in a new random order each pass drawn from
    `generator`: length-grouped (`length_grouped_order`) when `group_batches` > 0, else plain shuffled."""
    from torch.utils.data import DataLoader

    from dreamgym_pl.policy.samples import collate

    coll = lambda b: collate(b, pad_id)  # noqa: E731
    if group_batches <= 0:
        return DataLoader(samples, batch_size=batch_size, shuffle=True, generator=generator, collate_fn=coll)
    sampler = LengthGroupedSampler(sample_lengths(samples), batch_size, group_batches, generator)
    # the loader draws its workers' base seed from `generator` too, as a shuffled one does (not from the global RNG)
    return DataLoader(samples, batch_size=batch_size, sampler=sampler, generator=generator, collate_fn=coll)
