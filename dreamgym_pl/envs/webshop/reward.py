"""WebShop's purchase reward (Yao et al. 2022, `get_reward`), as pure functions.

reward = (matched goal attributes + matched goal options + 1[price <= bound]) / (n_attrs + n_options + 1) * r_type

Nouns: WebShop tags title nouns with spaCy. We do without spaCy: a title's nouns are its alphabetic
tokens of 3+ letters that are neither stop words nor known modifiers (colours, sizes, attribute words,
descriptors). For generated products this yields brand + product-type words, which is what spaCy tags
as PROPN/NOUN on such titles; for real titles it over-counts adjectives that are not in the list.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from rapidfuzz import fuzz

from dreamgym_pl.envs.webshop.catalogue import CATEGORIES, DESCRIPTORS

STOPWORDS = {
    "the", "and", "for", "with", "from", "that", "this", "are", "was", "you", "your", "our", "its", "all",
    "any", "not", "but", "can", "has", "have", "into", "per", "pack", "set", "inch", "ounce", "pound",
    "feet", "count", "new", "one", "two",
}
_MODIFIERS: set[str] = set(DESCRIPTORS)
for _spec in CATEGORIES.values():
    for _a in _spec["attributes"]:
        _MODIFIERS.update(_a.split())
    for _vals in _spec["options"].values():
        for _v in _vals:
            _MODIFIERS.update(_v.split())


def title_nouns(title: str) -> list[str]:
    toks = re.findall(r"[a-z]+", title.lower())
    return [t for t in toks if len(t) >= 3 and t not in STOPWORDS and t not in _MODIFIERS]


def type_reward(purchased: dict[str, Any], goal: dict[str, Any]) -> float:
    """r_type with WebShop's thresholds: 1 on query/category/title match, else 0.5; 0.1 below 0.1 overlap;
    0 at no overlap."""
    query_match = bool(purchased.get("query")) and purchased.get("query") == goal.get("query")
    p_cat = {x.strip() for x in str(purchased.get("product_category", "")).split("›") if x.strip()}
    g_cat = {x.strip() for x in str(goal.get("product_category", "")).split("›") if x.strip()}
    category_match = len(p_cat & g_cat) >= 2
    p_nouns = set(title_nouns(purchased.get("name", "")))
    g_nouns = title_nouns(goal.get("name", ""))
    if not g_nouns:
        title_score = 0.2
    else:
        title_score = len(p_nouns & set(g_nouns)) / len(set(g_nouns))
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def attribute_matches(purchased: dict[str, Any], goal_attrs: Iterable[str]) -> int:
    """Goal attributes matched by fuzzy match (token_set_ratio > 85) against a product attribute, else by
    substring of the lower-cased title, bullet points or description."""
    p_attrs = purchased.get("Attributes", [])
    title = str(purchased.get("Title", "")).lower()
    bullets = " ".join(purchased.get("BulletPoints", [])).lower()
    desc = str(purchased.get("Description", "")).lower()
    n = 0
    for g in goal_attrs:
        if any(fuzz.token_set_ratio(p, g) > 85 for p in p_attrs):
            n += 1
        elif g in title or g in bullets or g in desc:
            n += 1
    return n


def option_matches(purchased_options: Iterable[str], goal_options: Iterable[str]) -> int:
    p = [o.lower() for o in purchased_options]
    return sum(1 for g in goal_options if any(fuzz.token_set_ratio(x, g.lower()) > 85 for x in p))


def goal_option_values(goal: dict[str, Any]) -> list[str]:
    """The goal's wanted option values (goal_options may be a dict or a list)."""
    go = goal.get("goal_options", [])
    return list(go.values()) if isinstance(go, dict) else list(go)


def reward_with_goal_options(product: dict[str, Any], goal: dict[str, Any]) -> float:
    """The reward of buying `product` with every goal option it offers selected (what the oracle checks, and the
    best a buyer of that product can get)."""
    wanted = goal_option_values(goal)
    have = [v for vals in product.get("options", {}).values() for v in vals if v in wanted]
    return purchase_reward(product, have, goal)["reward"]


def purchase_reward(purchased: dict[str, Any], selected_options: Iterable[str], goal: dict[str, Any]) -> dict[str, float]:
    """The full reward and its parts for buying `purchased` with `selected_options` against `goal`."""
    goal_attrs = goal.get("attributes", [])
    goal_opts = goal_option_values(goal)
    n_attr = attribute_matches(purchased, goal_attrs)
    n_opt = option_matches(selected_options, goal_opts)
    price_ok = 1.0 if float(purchased.get("Price", 0.0)) <= float(goal.get("price_upper", float("inf"))) else 0.0
    r_type = type_reward(purchased, goal)
    total = (n_attr + n_opt + price_ok) / (len(goal_attrs) + len(goal_opts) + 1) * r_type
    return {
        "reward": float(total),
        "r_type": r_type,
        "r_price": price_ok,
        "n_attr_match": float(n_attr),
        "n_option_match": float(n_opt),
        "n_attrs": float(len(goal_attrs)),
        "n_options": float(len(goal_opts)),
    }
