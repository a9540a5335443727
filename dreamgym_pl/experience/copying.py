"""Copy examples: sequences of the env's own tokens in random order, to be repeated verbatim.

The tiny experience model predicts typical text instead of copying spans of its prompt (README "Fidelity": asked
to echo a task line, it wrote a typical instruction of the same product type). A purchase's judgement needs
copying: the task's attribute and option values are checked against the page. Text in random order has no
n-gram to predict from, so the only way to lower the loss on these examples is to find each token's earlier
occurrence and copy its successor (an induction head). Mixed into the experience model's training data.
"""

from __future__ import annotations

import random
from typing import Sequence

from dreamgym_pl.policy.samples import StepSample


def token_pool(id_lists: Sequence[Sequence[int]], special_ids: Sequence[int] = ()) -> list[int]:
    """Every token id of the tokenised texts (with repeats: drawing from it follows the env text's frequencies),
    special tokens left out."""
    skip = set(special_ids)
    return [i for ids in id_lists for i in ids if i not in skip]


def copy_examples(pool: Sequence[int], n: int, min_len: int, max_len: int, sep_ids: Sequence[int], eos_id: int,
                  rng: random.Random) -> list[StepSample]:
    """`n` examples: prompt = L tokens drawn from `pool` + `sep_ids`, target = the same L tokens + EOS, with L
    uniform in [min_len, max_len]."""
    if n <= 0:
        return []
    if not pool:
        raise ValueError("copy_examples: the token pool is empty")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"copy_examples: need 1 <= min_len <= max_len, got {min_len}, {max_len}")
    out = []
    for _ in range(n):
        seq = [pool[rng.randrange(len(pool))] for _ in range(rng.randint(min_len, max_len))]
        out.append(StepSample(seq + list(sep_ids), seq + [eos_id]))
    return out
