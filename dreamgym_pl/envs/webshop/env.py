"""The built-in WebShop environment in WebShop's text mode.

Pages: search -> results (paged) -> item (options, description, features, reviews) -> buy.
Observations join page elements with ` [SEP] ` and list the admissible actions; actions are
`search[query]` and `click[element]`. An invalid action leaves the page unchanged, says so in the
observation and is counted in `info`. The episode ends on `click[buy now]` (reward = WebShop's purchase
reward, success = reward 1.0) or after `max_steps` steps (reward 0).

The batched environment of the pipeline (the `Environment` contract) is `vec.WebShopVecEnv`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from dreamgym_pl.core import Observation, StepResult, Task
from dreamgym_pl.envs.webshop.catalogue import generate_catalogue, load_webshop_products
from dreamgym_pl.envs.webshop.goals import generate_goals, split_goals
from dreamgym_pl.envs.webshop.reward import purchase_reward
from dreamgym_pl.envs.webshop.search import SearchEngine

SEP = " [SEP] "
BACK, NEXT, PREV, BUY = "back to search", "next >", "< prev", "buy now"
SUBPAGES = ("description", "features", "reviews")
_ACTION_RE = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.DOTALL | re.IGNORECASE)


def parse_action(action: str) -> tuple[str, str] | None:
    """('search'|'click', argument) with the argument lower-cased and spaces collapsed, or None."""
    m = _ACTION_RE.match(action or "")
    if not m:
        return None
    arg = " ".join(m.group(2).lower().split())
    if not arg:
        return None
    return m.group(1).lower(), arg


def click_key(s: str) -> str:
    """Spacing-insensitive key for matching clicks ("next >" == "next>", "x - large" == "x-large")."""
    return re.sub(r"\s+", "", s.lower())


def fmt_price(p: float) -> str:
    return f"${p:.2f}"


class WebShopEngine:
    """The shared, read-only world: catalogue, search index, goals and the fixed split (test = the first
    `num_test` goals, val = the next `num_val`, train = the rest)."""

    def __init__(self, num_products: int = 1000, seed: int = 0, goals_per_product: int = 2, num_test: int = 500,
                 results_per_page: int = 10, max_results: int = 50, products_file: str | None = None,
                 attributes_file: str | None = None, num_val: int = 200):
        if products_file:
            self.products = load_webshop_products(products_file, attributes_file)
        else:
            self.products = generate_catalogue(num_products, seed)
        self.by_asin = {p["asin"]: i for i, p in enumerate(self.products)}
        self.search_engine = SearchEngine(self.products, max_results=max_results)
        self.goals = generate_goals(self.products, goals_per_product, seed)
        if num_test >= len(self.goals):
            raise ValueError(f"env.num_test: {num_test} leaves no training goals out of {len(self.goals)}")
        if not isinstance(num_val, int) or isinstance(num_val, bool) or num_val < 1:
            raise ValueError(f"env.num_val: must be an integer >= 1, got {num_val!r}")
        if num_test + num_val >= len(self.goals):
            raise ValueError(f"env.num_val: {num_val} val goals after {num_test} test goals leave no training goals "
                             f"out of {len(self.goals)}; lower env.num_val (or env.num_test)")
        self.num_test, self.num_val = num_test, num_val
        self.results_per_page = results_per_page

    def tasks(self, split: str) -> list[Task]:
        return split_goals(self.goals, split, self.num_test, self.num_val)


@dataclass
class _State:
    page: str = "search"  # search | results | item | sub
    query: str = ""
    results: list[int] = field(default_factory=list)
    page_no: int = 1
    item: int | None = None
    sub: str = ""
    selected: dict[str, str] = field(default_factory=dict)


class WebShopEnv:
    """One episode at a time over a shared WebShopEngine."""

    def __init__(self, engine: WebShopEngine, max_steps: int = 15, show_instruction: bool = True,
                 product_ids: str = "asin"):
        if product_ids not in ("asin", "index"):
            raise ValueError(f"env.product_ids: must be asin or index, got {product_ids!r}")
        self.product_ids = product_ids
        self.engine = engine
        self.max_steps = max_steps
        self.show_instruction = show_instruction
        self.task: Task | None = None
        self.state = _State()
        self.steps = 0
        self.invalid_count = 0
        self.done = False

    # ----- rendering -------------------------------------------------------------------------------
    def _clickables(self) -> list[str]:
        s, e = self.state, self.engine
        if s.page == "search":
            return []
        if s.page == "results":
            n_pages = max(1, -(-len(s.results) // e.results_per_page))
            out = [BACK]
            if s.page_no > 1:
                out.append(PREV)
            if s.page_no < n_pages:
                out.append(NEXT)
            return out + [self._handle(k, i) for k, i in enumerate(self._page_results())]
        if s.page == "item":
            p = e.products[s.item]
            opts = [v for vals in p["options"].values() for v in vals]
            return [BACK, PREV] + opts + list(SUBPAGES) + [BUY]
        return [BACK, PREV]

    def _handle(self, k: int, i: int) -> str:
        """How a listed product is named and clicked: its asin (WebShop) or `item k` (numbered elements, the
        abstract state of the DreamGym paper; easier for small models than copying ids)."""
        return self.engine.products[i]["asin"] if self.product_ids == "asin" else f"item {k + 1}"

    def _page_results(self) -> list[int]:
        s, n = self.state, self.engine.results_per_page
        return s.results[(s.page_no - 1) * n: s.page_no * n]

    def _render(self, note: str = "") -> Observation:
        s, e = self.state, self.engine
        parts: list[str] = []
        if note:
            parts.append(note)
        if self.show_instruction and self.task is not None:
            parts += ["instruction:", self.task.instruction]
        if s.page == "search":
            parts.append("search")
            adm = ["search[...]"]
        else:
            adm = [f"click[{c}]" for c in self._clickables()]
            if s.page == "results":
                parts.append(BACK)
                parts.append(f"page {s.page_no} (total results: {len(s.results)})")
                if s.page_no > 1:
                    parts.append(PREV)
                if NEXT in self._clickables():
                    parts.append(NEXT)
                for k, i in enumerate(self._page_results()):
                    p = e.products[i]
                    parts += [self._handle(k, i), p["Title"], fmt_price(p["Price"])]
            elif s.page == "item":
                p = e.products[s.item]
                parts += [BACK, PREV]
                for otype, vals in p["options"].items():
                    sel = s.selected.get(otype)
                    parts.append(f"{otype}:" if sel is None else f"{otype} ({sel}):")
                    parts += vals
                parts += [p["Title"], f"price: {fmt_price(p['Price'])}", *SUBPAGES, BUY]
            else:
                p = e.products[s.item]
                parts += [BACK, PREV]
                if s.sub == "description":
                    parts.append(p["Description"])
                elif s.sub == "features":
                    parts += p["BulletPoints"]
                else:
                    parts.append("no reviews yet")
        refs = {self._handle(k, i): e.products[i]["asin"] for k, i in enumerate(self._page_results())} \
            if s.page == "results" else {}
        return Observation(text=SEP.join(parts), admissible=adm, refs=refs)

    # ----- episode ---------------------------------------------------------------------------------
    def reset(self, task: Task) -> Observation:
        self.task = task
        self.state = _State()
        self.steps = 0
        self.invalid_count = 0
        self.done = False
        return self._render()

    def _apply(self, kind: str, arg: str) -> dict[str, Any] | None:
        """Change the state for a valid action; None if the action is not admissible here."""
        s, e = self.state, self.engine
        if kind == "search":
            if s.page != "search":
                return None
            s.query, s.results, s.page_no, s.page = arg, e.search_engine.search(arg), 1, "results"
            return {}
        keys = {click_key(c): c for c in self._clickables()}
        target = keys.get(click_key(arg))
        if target is None:
            return None
        if target == BACK:
            self.state = _State()
        elif s.page == "results":
            if target == NEXT:
                s.page_no += 1
            elif target == PREV:
                s.page_no -= 1
            else:
                handles = {self._handle(k, i): i for k, i in enumerate(self._page_results())}
                s.item, s.page, s.selected = handles[target], "item", {}
        elif s.page == "item":
            p = e.products[s.item]
            if target == PREV:
                s.page = "results"
            elif target in SUBPAGES:
                s.page, s.sub = "sub", target
            elif target == BUY:
                r = purchase_reward(p, list(s.selected.values()), self.task.goal if self.task else {})
                return {"purchase": r, "asin": p["asin"], "selected": dict(s.selected)}
            else:
                for otype, vals in p["options"].items():
                    if target in vals:
                        s.selected[otype] = target
                        break
        else:  # sub page
            s.page = "item"
        return {}

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self.steps += 1
        parsed = parse_action(action)
        out = self._apply(*parsed) if parsed else None
        info: dict[str, Any] = {"invalid": out is None, "success": False}
        reward, done = 0.0, False
        if out is None:
            self.invalid_count += 1
            obs = self._render(note=f"invalid action: {action.strip()[:80]}")
        else:
            if "purchase" in out:
                reward = out["purchase"]["reward"]
                done = True
                info.update(out["purchase"])
                info["asin"] = out["asin"]
                info["selected"] = out["selected"]
                info["success"] = reward >= 1.0 - 1e-9
                obs = Observation(text="thank you for shopping with us! [SEP] your score: " + f"{reward:.2f}", admissible=[])
            else:
                obs = self._render()
        if not done and self.steps >= self.max_steps:
            done = True
            info["truncated"] = True
        info["invalid_count"] = self.invalid_count
        info["score"] = reward
        self.done = done
        return StepResult(observation=obs, reward=reward, done=done, info=info)


@lru_cache(maxsize=8)
def _cached_engine(**kwargs: Any) -> WebShopEngine:
    return WebShopEngine(**kwargs)


def get_engine(num_products: int = 1000, seed: int = 0, goals_per_product: int = 2, num_test: int = 500,
               results_per_page: int = 10, max_results: int = 50, products_file: str | None = None,
               attributes_file: str | None = None, num_val: int = 200) -> WebShopEngine:
    return _cached_engine(num_products=num_products, seed=seed, goals_per_product=goals_per_product,
                          num_test=num_test, results_per_page=results_per_page, max_results=max_results,
                          products_file=products_file, attributes_file=attributes_file, num_val=num_val)
