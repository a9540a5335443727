"""What every generation engine shares: sampling parameters, completions, the engine protocol and the
stop-string rules (pure functions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    max_new_tokens: int = 16
    stop: list[str] = field(default_factory=list)  # text is cut after the first stop string


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    logprobs: list[float]


class GenerationEngine(Protocol):
    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]: ...

    def load_weights(self, model: Any) -> None: ...

    # optional: `sleep()` frees generation memory while the trainer trains (vLLM); generate wakes it up


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """Text up to and including the earliest stop string; whether one was found."""
    best = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or i + len(s) < best):
            best = i + len(s)
    return (text, False) if best is None else (text[:best], True)


def tokens_through_stop(ids: Sequence[int], decode: Any, stops: Sequence[str]) -> int:
    """Length of the shortest prefix of `ids` whose decoded text contains a stop string (len(ids) if none
    does): the tokens after it never reached the environment, so they must not be trained on."""
    if not stops or not cut_at_stop(decode(list(ids)), stops)[1]:
        return len(ids)
    lo, hi = 1, len(ids)  # "prefix contains a stop" is monotone in the prefix length
    while lo < hi:
        mid = (lo + hi) // 2
        if cut_at_stop(decode(list(ids[:mid])), stops)[1]:
            hi = mid
        else:
            lo = mid + 1
    return lo
