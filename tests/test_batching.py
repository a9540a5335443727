"""Length-grouped batching (dreamgym_pl/policy/batching.py): hand-computed orders and padding, the sampler's
determinism, the loader that uses it, and the default (off) being the plain shuffled DataLoader it replaced."""

import random

import torch

from dreamgym_pl.policy.batching import LengthGroupedSampler, length_grouped_order, padding_share, shuffled_loader
from dreamgym_pl.policy.samples import StepSample


def batches_of(order, size):
    return [order[j:j + size] for j in range(0, len(order), size)]


def test_off_is_the_plain_shuffle():
    expected = list(range(7))
    random.Random(3).shuffle(expected)
    assert length_grouped_order([1] * 7, 2, 0, random.Random(3)) == expected


def test_one_group_holds_neighbours_in_length():
    lengths = [5, 1, 4, 2, 3, 6]  # sorted: index 1 (1), 3 (2), 4 (3), 2 (4), 0 (5), 5 (6)
    order = length_grouped_order(lengths, 2, 3, random.Random(0))
    assert sorted(order) == list(range(6))
    assert {frozenset(b) for b in batches_of(order, 2)} == {frozenset({1, 3}), frozenset({4, 2}), frozenset({0, 5})}


def test_a_short_batch_comes_last():
    lengths = [5, 1, 4, 2, 3]  # one group of 5 at batch 2: [1, 3], [4, 2], then [0] alone
    for seed in range(5):
        order = length_grouped_order(lengths, 2, 3, random.Random(seed))
        assert order[-1] == 0 and {frozenset(b) for b in batches_of(order[:4], 2)} == {frozenset({1, 3}), frozenset({4, 2})}


def test_groups_are_cut_from_the_permutation():
    # two groups of 2 batches: each group holds one half of the shuffled permutation, cut into its two batches by length
    lengths = list(range(8))
    perm = list(range(8))
    random.Random(1).shuffle(perm)
    order = length_grouped_order(lengths, 2, 2, random.Random(1))
    assert set(order[:4]) == set(perm[:4]) and set(order[4:]) == set(perm[4:])
    for group in (order[:4], order[4:]):
        s = sorted(group)
        assert {frozenset(b) for b in batches_of(group, 2)} == {frozenset(s[:2]), frozenset(s[2:])}


def test_padding_share_by_hand():
    # batches [2, 4] and [3, 3]: padded 2 * 4 + 2 * 3 = 14 tokens, 12 real
    assert abs(padding_share([2, 4, 3, 3], [0, 1, 2, 3], 2) - 2 / 14) < 1e-12
    assert abs(padding_share([3, 3, 3, 4], [0, 1, 2, 3], 2) - 1 / 14) < 1e-12  # [3, 3]: none; [3, 4]: 1 of 8
    assert padding_share([], [], 4) == 0.0


def test_sampler_replays_from_its_generator_and_changes_each_pass():
    lengths = [random.Random(i).randint(1, 50) for i in range(64)]
    a = LengthGroupedSampler(lengths, 4, 4, torch.Generator().manual_seed(9))
    b = LengthGroupedSampler(lengths, 4, 4, torch.Generator().manual_seed(9))
    first_a, first_b = list(a), list(b)
    assert first_a == first_b and sorted(first_a) == list(range(64)) and len(a) == 64
    assert list(a) != first_a  # a new order each pass


def test_grouped_loader_pads_less_and_sees_every_sample_once():
    rng = random.Random(0)
    samples = [StepSample([5] * rng.randint(1, 60), [6, 2], traj=i) for i in range(96)]
    seen, padded = {}, {}
    for g in (0, 6):
        loader = shuffled_loader(samples, 8, 0, torch.Generator().manual_seed(1), group_batches=g)
        batches = list(loader)
        seen[g] = sorted(int(t) for b in batches for t in b["traj"])
        padded[g] = sum(b["input_ids"].numel() for b in batches)
    assert seen[0] == seen[6] == list(range(96))
    assert padded[6] < padded[0]


def test_off_is_the_shuffled_dataloader_it_replaced():
    """group_batches=0 (the default) gives the batches of DataLoader(shuffle=True, generator=...) pass after pass."""
    from torch.utils.data import DataLoader

    from dreamgym_pl.policy.samples import collate

    samples = [StepSample([5] * (1 + i % 7), [6, 2], traj=i) for i in range(37)]
    old = DataLoader(samples, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(4),
                     collate_fn=lambda b: collate(b, 0))
    new = shuffled_loader(samples, 5, 0, torch.Generator().manual_seed(4), group_batches=0)
    for _ in range(2):
        assert [b["traj"].tolist() for b in old] == [b["traj"].tolist() for b in new]
