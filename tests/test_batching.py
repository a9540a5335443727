"""Batching of the supervised stages (dreamgym_pl/policy/batching.py): the seeded order, hand-computed padding, and
the loader being the plain shuffled DataLoader it replaced."""

import random

import torch

from dreamgym_pl.policy.batching import padding_share, shuffled_loader, shuffled_order
from dreamgym_pl.policy.samples import StepSample


def test_off_is_the_plain_shuffle():
    expected = list(range(7))
    random.Random(3).shuffle(expected)
    assert shuffled_order(7, random.Random(3)) == expected


def test_padding_share_by_hand():
    # batches [2, 4] and [3, 3]: padded 2 * 4 + 2 * 3 = 14 tokens, 12 real
    assert abs(padding_share([2, 4, 3, 3], [0, 1, 2, 3], 2) - 2 / 14) < 1e-12
    assert abs(padding_share([3, 3, 3, 4], [0, 1, 2, 3], 2) - 1 / 14) < 1e-12  # [3, 3]: none; [3, 4]: 1 of 8
    assert padding_share([], [], 4) == 0.0


def test_off_is_the_shuffled_dataloader_it_replaced():
    """shuffled_loader gives the batches of DataLoader(shuffle=True, generator=...) pass after pass."""
    from torch.utils.data import DataLoader

    from dreamgym_pl.policy.samples import collate

    samples = [StepSample([5] * (1 + i % 7), [6, 2], traj=i) for i in range(37)]
    old = DataLoader(samples, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(4),
                     collate_fn=lambda b: collate(b, 0))
    new = shuffled_loader(samples, 5, 0, torch.Generator().manual_seed(4))
    for _ in range(2):
        assert [b["traj"].tolist() for b in old] == [b["traj"].tolist() for b in new]
