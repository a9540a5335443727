import math
import random

import pytest

from dreamgym_pl.experience.copying import copy_examples, copy_warmup, token_pool


def test_token_pool_is_the_distinct_ids_without_special_ones():
    assert token_pool([[6, 1, 5], [6, 2]], special_ids=[1, 2]) == [5, 6]


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


def test_copy_examples_draw_the_pool_uniformly():
    ex = copy_examples([1, 2], 200, 10, 10, [0], 3, random.Random(1))
    ones = sum(t == 1 for s in ex for t in s.prompt_ids[:-1])
    assert 0.45 < ones / 2000 < 0.55


def test_copy_examples_none_and_bad_arguments():
    assert copy_examples([], 0, 1, 2, [0], 3, random.Random(0)) == []
    with pytest.raises(ValueError, match="empty"):
        copy_examples([], 1, 1, 2, [0], 3, random.Random(0))
    with pytest.raises(ValueError, match="min_len"):
        copy_examples([1], 1, 5, 2, [0], 3, random.Random(0))


def test_copy_warmup_trains_the_model_deterministically():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    def model():
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64))

    a, b = model(), model()
    before = [p.detach().clone() for p in a.parameters()]
    la = copy_warmup(a, list(range(5, 40)), 4, 3, 1e-2, 8, [4], 3, 0, seed=7, warmup_steps=1)
    lb = copy_warmup(b, list(range(5, 40)), 4, 3, 1e-2, 8, [4], 3, 0, seed=7, warmup_steps=1)
    assert len(la) == 4 and all(math.isfinite(x) for x in la)
    assert la == lb  # same seed: same examples, same steps
    assert any(not torch.equal(p, q) for p, q in zip(before, a.parameters()))
