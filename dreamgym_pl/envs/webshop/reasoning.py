"""WebShop's ground-truth reasoning traces (the teacher traces R*_t of the paper's Eq. 5): what the action
did, and for a purchase which goal attributes / options / price the product met and the resulting reward."""

from __future__ import annotations

from dreamgym_pl.core import Transition
from dreamgym_pl.envs.webshop.env import parse_action


def webshop_reasoning(t: Transition) -> str:
    """The reasoning trace of a real WebShop transition (`WebShopVecEnv.explain`)."""
    info = t.info
    if info.get("invalid"):
        return "the action is not available on this page so the page stays and nothing is bought"
    parsed = parse_action(t.action)
    if parsed is None:
        return "the action is malformed so the page stays"
    kind, arg = parsed
    if kind == "search":
        return f"searching for {arg} lists the best matching products ranked by relevance"
    if arg == "buy now":
        n_a, a = int(info.get("n_attr_match", 0)), int(info.get("n_attrs", 0))
        n_o, o = int(info.get("n_option_match", 0)), int(info.get("n_options", 0))
        price = "within" if info.get("r_price", 0) else "over"
        typ = "matches" if info.get("r_type", 0) >= 1 else "does not match"
        return (f"buying ends the episode the product meets {n_a} of {a} attributes and {n_o} of {o} options "
                f"its price is {price} the budget and its type {typ} so the reward is {t.reward:.2f}")
    if arg == "back to search":
        return "going back returns to the search page"
    if arg == "next >":
        return "the next page lists further results"
    if arg == "< prev":
        return "going back shows the previous page"
    if arg in ("description", "features", "reviews"):
        return f"this opens the {arg} of the product"
    if "item page" in info.get("page", "") or t.next_state.text.count("buy now"):
        if "(" + arg + ")" in t.next_state.text:
            return f"this selects the option {arg} for the product"
        return f"this opens the product page of {arg} with its options and price"
    return f"clicking {arg} changes the page"
