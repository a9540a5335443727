"""A KV cache for batched decoding: allocated once per `generate` call, written in place (as Hugging Face's static
cache), and read only up to the positions filled so far (`engine.cache: filled`, the default of conf/engine/hf.yaml;
measured on CPU, GPU unmeasured).

Hugging Face's `StaticCache` hands every layer its whole buffer (prompt + `max_new_tokens` positions) at every
decoding step and masks the unfilled tail, so attention reads positions that hold nothing; its dynamic cache reads
only what is filled but copies itself whole for every new token. `FilledCache` keeps the in-place writes and
returns views of the filled prefix, and sizes the attention mask to match. Decoding is memory-bound on these
models (each step reads every row's keys and values), so the tail is time (measured: README "A filled KV
cache and smaller budgets"). The filled length is counted in Python (no device read per layer and step).
It needs transformers' layered caches with `get_mask_sizes(query_length)` (5.x; `supports` says whether the
installed version and the model's config qualify; the engine falls back to the static cache where not). Shapes change
at every step, so it is never compiled (the engine passes `disable_compile=True`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers import StaticCache
from transformers.cache_utils import StaticLayer


class FilledLayer(StaticLayer):
    """A static layer whose `update` returns the filled positions only."""

    def __init__(self, max_cache_len: int, **kwargs: Any):
        super().__init__(max_cache_len=max_cache_len, **kwargs)
        self.filled = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if self.filled + key_states.shape[-2] > self.max_cache_len:
            raise ValueError(f"FilledCache: {self.filled + key_states.shape[-2]} positions exceed its "
                             f"{self.max_cache_len}")
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        self.filled += key_states.shape[-2]
        return keys[:, :, :self.filled], values[:, :, :self.filled]

    def get_mask_sizes(self, query_length: int, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return self.filled + query_length, 0  # asked before the forward's update: what attention will read

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)  # static layers crop by a negative count
        self.filled -= abs(tokens_to_remove)

    def reset(self) -> None:
        super().reset()
        self.filled = 0


class FilledCache(StaticCache):
    """`StaticCache` of `max_cache_len` positions whose full-attention layers are `FilledLayer`s. A model with
    other kinds of layers (sliding windows, ...) is refused: `supports` says which configs qualify (the engine
    falls back to the static cache for the others)."""

    def __init__(self, config: Any, max_cache_len: int):
        super().__init__(config=config, max_cache_len=max_cache_len)
        if not all(type(layer) is StaticLayer for layer in self.layers):
            raise ValueError("FilledCache: the model has layers other than full attention (engine.cache=static)")
        self.layers = [FilledLayer(max_cache_len=max_cache_len) for _ in self.layers]

    @staticmethod
    def supports(config: Any) -> bool:
        """Whether this transformers version asks a layer for its mask size by query length (what `FilledLayer`
        answers) and every layer of `config`'s model is plain full attention."""
        if list(inspect.signature(StaticLayer.get_mask_sizes).parameters)[1:2] != ["query_length"]:
            return False
        try:
            return all(type(layer) is StaticLayer for layer in StaticCache(config=config, max_cache_len=1).layers)
        except Exception:  # a config StaticCache cannot read
            return False
