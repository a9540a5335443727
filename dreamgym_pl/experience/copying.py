"""Copy examples: sequences of the env's own tokens in random order, to be repeated verbatim.

The tiny experience model predicts typical text instead of copying spans of its prompt (README "Fidelity": asked
to echo a task line, it wrote a typical instruction of the same product type). A purchase's judgement needs
copying: the task's attribute and option values are checked against the page. Text in random order has no
n-gram to predict from, so the only way to lower the loss on these examples is to find each token's earlier
occurrence and copy its successor (an induction head). Tokens are drawn uniformly from the env's distinct
tokens: drawn by frequency, the same few tokens (`[SEP]`, `:`) repeat within a sequence, the successor to copy is
ambiguous, and the tiny model learned only the unigram loss in 1,500 steps (measured); drawn uniformly, its copy
loss fell from 4.6 to 0.9 between steps 500 and 1,000 (batch 32). The sft stage uses them for the tiny policy
(stages/copy_start.py): `copy_warmup` trains on them before its demonstrations (a warm start); `copy_examples`
also mixes them into the demonstrations, so that the ability stays.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from dreamgym_pl.policy.samples import StepSample


def token_pool(id_lists: Sequence[Sequence[int]], special_ids: Sequence[int] = ()) -> list[int]:
    """The distinct token ids of the tokenised texts, sorted, special tokens left out."""
    skip = set(special_ids)
    return sorted({i for ids in id_lists for i in ids} - skip)


def copy_examples(pool: Sequence[int], n: int, min_len: int, max_len: int, sep_ids: Sequence[int], eos_id: int,
                  rng: random.Random) -> list[StepSample]:
    """`n` examples: prompt = L tokens drawn uniformly from `pool` + `sep_ids`, target = the same L tokens + EOS, with L
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


def copy_warmup(model: Any, pool: Sequence[int], steps: int, batch_size: int, lr: float, max_len: int,
                sep_ids: Sequence[int], eos_id: int, pad_id: int, seed: int, warmup_steps: int = 50,
                grad_clip: float | None = 1.0, log_every: int = 0, what: str = "the copy warm-up",
                micro_batches: int = 1, precision: Any = "32-true") -> list[float]:
    """`steps` AdamW steps of `model` on fresh copy examples (L uniform in [4, max_len]), linear warm-up then a
    constant `lr`; returns the loss of every step."""
    from dreamgym_pl.experience.train_steps import adamw_steps
    from dreamgym_pl.policy.samples import collate

    rng = random.Random(seed)
    batches = (collate(copy_examples(pool, batch_size, 4, max_len, sep_ids, eos_id, rng), pad_id) for _ in range(steps))
    return adamw_steps(model, batches, steps, lr, warmup_steps, grad_clip, what, log_every, micro_batches, precision)
