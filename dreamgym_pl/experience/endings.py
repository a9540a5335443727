"""Extra training on the steps that decide an episode's reward (WebShop: purchases), failed and successful ones
drawn equally often.

Why (README "Fidelity"): trained on the experience data as they come, the tiny experience model calls every
purchase a success. Purchases are ~1 in 6 training targets, and 94% of those in its data succeeded while the bound
kept the first 3,000 offline transitions (oracle episodes first; 85% with the random-order bound), so the verdict
gets little of the loss and "success" is its cheapest guess. `experiments/diagnostics/purchase_fit.py` measured that the same model, drilled on class-balanced purchases
alone, fits them and gets 11 of 19 failures of other training tasks right. `experience.ending_steps` runs that
drill inside the experience stage, after its main training, with the regular samples mixed in so that the rest of
what it predicts is kept; measured there, it did not carry over to the SFT policy's own purchases (README
"Fidelity"), so it is off by default.
"""

from __future__ import annotations

import random
from typing import Any, Sequence, TypeVar

from dreamgym_pl.core import Trajectory

T = TypeVar("T")


def decided_ending(traj: Trajectory) -> bool:
    """The episode ended by the env's decision (done, not cut by the step limit: `info["truncated"]`)."""
    return bool(traj.transitions) and traj.transitions[-1].done and not traj.transitions[-1].info.get("truncated")


def ending_samples(trajs: Sequence[Trajectory], samples: Sequence[T]) -> tuple[list[T], list[T]]:
    """(failed, successful) samples of the episode-ending steps that the env decided (done, not cut by the step
    limit: `info["truncated"]`; reward >= 1 is a success). `samples` holds one sample per transition of `trajs`, in order (as
    `experience_samples` with `terminal_repeat=1` makes them)."""
    if len(samples) != sum(len(tr.transitions) for tr in trajs):
        raise ValueError(f"ending_samples: {len(samples)} samples for "
                         f"{sum(len(tr.transitions) for tr in trajs)} transitions")
    failed: list[T] = []
    successful: list[T] = []
    i = 0
    for tr in trajs:
        i += len(tr.transitions)
        if decided_ending(tr):
            (successful if tr.transitions[-1].reward >= 1.0 else failed).append(samples[i - 1])
    return failed, successful


def balanced(failed: Sequence[T], successful: Sequence[T]) -> list[T]:
    """Both classes repeated in turn up to the larger one's size (an empty class stays empty)."""
    n = max(len(failed), len(successful))
    return ([failed[j % len(failed)] for j in range(n)] if failed else []) + \
        ([successful[j % len(successful)] for j in range(n)] if successful else [])


def ending_mix(endings: Sequence[T], regular: Sequence[T], rng: random.Random) -> list[T]:
    """`endings` plus as many of the `regular` samples, drawn without replacement (all of them if fewer)."""
    return list(endings) + rng.sample(list(regular), min(len(regular), len(endings)))


def ending_phase(model: Any, tokenizer: Any, trajs: Sequence[Trajectory], fmt: Any, buffer: Any, regular: Sequence,
                 steps: int, lr: float, batch_size: int, seed: int, grad_clip: float | None = None,
                 warmup_steps: int = 50, micro_batches: int = 1, precision: Any = "32-true") -> dict[str, float]:
    """`steps` AdamW steps of the experience model on the class-balanced ending steps of `trajs` mixed with as many
    `regular` samples (the stage's training samples), reshuffled every pass -> experience/ending_* counts and the
    last steps' mean loss. Nothing happens (and {} is returned) without steps or without any ending step."""
    from dreamgym_pl.experience.module import experience_samples
    from dreamgym_pl.experience.train_steps import adamw_steps, shuffled_batches

    if steps <= 0:
        return {}
    failed, successful = ending_samples(trajs, experience_samples(trajs, tokenizer, fmt, buffer))
    endings = balanced(failed, successful)
    if not endings:
        return {}
    rng = random.Random(seed)
    batches = shuffled_batches(lambda: ending_mix(endings, regular, rng), batch_size, tokenizer.pad_token_id, seed)
    losses = adamw_steps(model, batches, steps, lr, warmup_steps, grad_clip, "experience: the ending-step training", log_every=100,
                         micro_batches=micro_batches, precision=precision)
    tail = losses[-min(50, len(losses)):]
    return {"experience/ending_failed": float(len(failed)), "experience/ending_successful": float(len(successful)),
            "experience/ending_loss": sum(tail) / len(tail)}
