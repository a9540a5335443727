import random

import pytest

from dreamgym_pl.experience.copying import copy_examples, token_pool


def test_token_pool_keeps_repeats_and_drops_special_ids():
    assert token_pool([[5, 1, 6], [6, 2]], special_ids=[1, 2]) == [5, 6, 6]


def test_copy_examples_repeat_the_prompt_sequence_verbatim():
    pool = [10, 11, 12, 13]
    ex = copy_examples(pool, 50, 3, 6, sep_ids=[7, 8], eos_id=2, rng=random.Random(0))
    assert len(ex) == 50
    lengths = set()
    for s in ex:
        seq = s.prompt_ids[:-2]
        assert s.prompt_ids[-2:] == [7, 8]
        assert s.response_ids == seq + [2]
        assert set(seq) <= set(pool)
        lengths.add(len(seq))
    assert lengths == {3, 4, 5, 6}  # uniform over [min_len, max_len], both ends reached in 50 draws


def test_copy_examples_follow_the_pool_frequencies():
    ex = copy_examples([1] * 9 + [2], 200, 10, 10, [0], 3, random.Random(1))
    ones = sum(t == 1 for s in ex for t in s.prompt_ids[:-1])
    assert 0.85 < ones / 2000 < 0.95


def test_copy_examples_none_and_bad_arguments():
    assert copy_examples([], 0, 1, 2, [0], 3, random.Random(0)) == []
    with pytest.raises(ValueError, match="empty"):
        copy_examples([], 1, 1, 2, [0], 3, random.Random(0))
    with pytest.raises(ValueError, match="min_len"):
        copy_examples([1], 1, 5, 2, [0], 3, random.Random(0))
