"""BM25 product search (bm25s) over title, type, category, attributes and options."""

from __future__ import annotations

from typing import Any

import bm25s
import numpy as np


def product_text(p: dict[str, Any]) -> str:
    opts = " ".join(v for vals in p.get("options", {}).values() for v in vals)
    return " ".join([p.get("Title", ""), p.get("query", ""), p.get("product_category", "").replace("›", " "),
                     " ".join(p.get("Attributes", [])), opts, " ".join(p.get("BulletPoints", []))])


class SearchEngine:
    """Ranks products for a free-text query; ties keep catalogue order, so rankings are deterministic."""

    def __init__(self, products: list[dict[str, Any]], max_results: int = 50):
        self.products = products
        self.max_results = max_results
        corpus = bm25s.tokenize([product_text(p) for p in products], stopwords="en", return_ids=False,
                                show_progress=False)
        self._bm25 = bm25s.BM25()
        self._bm25.index(corpus, show_progress=False)
        self._cache: dict[str, list[int]] = {}

    def search(self, query: str) -> list[int]:
        """Indices of the top products with a positive score, best first."""
        q = query.strip().lower()
        if q in self._cache:
            return self._cache[q]
        toks = bm25s.tokenize([q], stopwords="en", return_ids=False, show_progress=False)[0]
        if not toks:
            res: list[int] = []
        else:
            scores = np.asarray(self._bm25.get_scores(toks))
            order = np.argsort(-scores, kind="stable")[: self.max_results]
            res = [int(i) for i in order if scores[i] > 0]
        if len(self._cache) > 10000:
            self._cache.clear()
        self._cache[q] = res
        return res
