"""What rules a WebShop purchase out as a success, read from the instruction and the agent's own episode.

WebShop pays a success only when the bought product's selected options match every option the instruction asks
for and its price is within the instruction's bound (`reward.purchase_reward`). Two of those conditions can be
checked without the env's hidden state: which option values the agent clicked on the item page (its own actions)
and the price the page it bought from shows. A synthetic episode whose purchase breaks one of them cannot be a
success in the real env, whatever the experience model's page or the outcome model's verdict says
(`experience.ending_rules`). The checks are necessary conditions only: a purchase that passes them may still fail
(product type, attributes), and they never rule out a purchase the real env pays as a success
(tests/test_ending_rules.py plays the real env to check it).

Text may come from a detokenised synthetic page (`price : $ 2 0 . 0 1`), so numbers and values are compared with
their whitespace removed.
"""

from __future__ import annotations

import re
from typing import Sequence

from rapidfuzz import fuzz

_OPTIONS = re.compile(r" with (?P<opts>.+?), and price lower than ", re.DOTALL)
_BOUND = re.compile(r"price lower than (?P<price>[\d\s.]+?) dollars")
_SHOWN = re.compile(r"price:\$(?P<price>\d+(?:\.\d+)?)")
_CLICK = re.compile(r"^\s*click\s*\[(?P<arg>.*)\]\s*$", re.DOTALL)


def _squash(text: str) -> str:
    return "".join(text.lower().split())


def wanted_options(instruction: str) -> list[str]:
    """The option values an instruction asks for (`... with color: coral, and size: small, and price lower than
    ...` -> ['coral', 'small']); [] when it names none."""
    m = _OPTIONS.search(" ".join(instruction.lower().split()))
    if not m:
        return []
    out = []
    for part in m.group("opts").split(", and "):
        _, sep, value = part.partition(":")
        if sep and value.strip():
            out.append(value.strip())
    return out


def price_bound(instruction: str) -> float | None:
    """The instruction's price bound (`price lower than 40.00 dollars` -> 40.0), None when it has none."""
    m = _BOUND.search(instruction.lower())
    if not m:
        return None
    try:
        return float(_squash(m.group("price")))
    except ValueError:
        return None


def shown_price(page: str) -> float | None:
    """The price an item page shows (`price: $41.40`, also spaced as `price : $ 4 1 . 4 0`), None if none."""
    m = _SHOWN.search(_squash(page))
    return float(m.group("price")) if m else None


def _results_page(page: str) -> bool:
    return "totalresults" in _squash(page)


def clicked_since_opened(history: Sequence[tuple[str, str]]) -> list[str]:
    """The click targets of the episode's actions taken since the product it ends on was opened: a search, a
    `back to search` or any click on a results page (which opens a product or turns the page) starts the list
    afresh, as the real env's selection starts empty on each product it opens. `history`: (page, action) pairs."""
    out: list[str] = []
    for page, action in history:
        m = _CLICK.match(action)
        if not m or _results_page(page) or _squash(m.group("arg")) == "backtosearch":
            out = []
            continue
        out.append(" ".join(m.group("arg").split()))
    return out


def option_chosen(wanted: str, clicked: Sequence[str]) -> bool:
    """Whether one of the clicked values can be the selected value that matches `wanted` (the reward's fuzzy
    match, token_set_ratio > 85, on the text as clicked and with its whitespace removed)."""
    w = _squash(wanted)
    return any(fuzz.token_set_ratio(c.lower(), wanted.lower()) > 85 or fuzz.ratio(_squash(c), w) > 85 for c in clicked)


def ending_check(instruction: str, history: Sequence[tuple[str, str]]) -> str | None:
    """Why the episode `history` ((page, action) pairs, the ending action last) cannot be a success: it does not
    end on `buy now`, an option the instruction asks for was not clicked since the product was opened, or the
    page shows a price above the bound; None when none of these holds."""
    if not history:
        return "no action"
    page, action = history[-1]
    m = _CLICK.match(action)
    if not m or _squash(m.group("arg")) != "buynow":
        return "not a purchase"
    clicked = clicked_since_opened(history[:-1])
    for value in wanted_options(instruction):
        if not option_chosen(value, clicked):
            return f"option {value} not chosen"
    price, bound = shown_price(page), price_bound(instruction)
    if price is not None and bound is not None and price > bound:
        return f"price {price:.2f} over {bound:.2f}"
    return None
