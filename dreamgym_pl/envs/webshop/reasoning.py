"""WebShop's ground-truth reasoning traces (the teacher traces R*_t of the paper's Eq. 5): what the action
did, and for a purchase a checklist of the goal's requirements against the bought product and the reward.

The purchase checklist names each requirement with the words that decide it, so that the experience model
can copy them from its prompt (the task line and the item page) instead of counting matches in one step:
`type coffee table yes . non slip no . color white not chosen . size small yes . price under 320.00 yes .
so 3 of 5 are met and the reward is 0.60`.

`trace: evidence` also quotes, before each verdict it can be read from, what the item page shows for it (the
title, the option's header as rendered, `size (small)` or a bare `size` when none was chosen, the price):
`type coffee table : page acme classic coffee table : yes . size small : page size (small) : yes . price under
320.00 : page $280.57 : yes`. The verdict then compares two neighbouring spans instead of the task line with a
page 400 tokens back, which is what a small pretrained model gets wrong (README "SmolLM2 as the experience model").
The attributes have no evidence on the item page (WebShop shows them on the description sub-page).

`trace: tally` is `evidence` with the sum spelled out: the failed checks are named, then the count, then WebShop's
type factor, so that the reward follows from the checks above it in short steps instead of one: `... failed : size
small , price . so 3 of 5 are met , type factor 1.0 , and the reward is 0.60`, or `nothing failed so the reward is
1.00`. It answers what evidence traces still got wrong (README): after `type ... : no` the model wrote `so 3 of 3 are
met and the reward is 1.00`, since the count never named the type."""

from __future__ import annotations

from typing import Any

from dreamgym_pl.core import Transition
from dreamgym_pl.envs.webshop.env import fmt_price, parse_action
from dreamgym_pl.envs.webshop.reward import attribute_matches, option_matches


TRACES = ("checklist", "evidence", "tally")  # env.trace


def purchase_checklist(goal: dict[str, Any], product: dict[str, Any], selected: dict[str, str], info: dict[str, Any],
                       reward: float, trace: str = "checklist") -> str:
    """Each goal requirement with its outcome (by the reward's own match rules), then the count and reward;
    `trace` (one of TRACES): `evidence` precedes each verdict the item page decides with what the page shows
    (`page ...`); `tally` does that and names the failed checks and the type factor before the reward."""
    evidence, tally = trace in ("evidence", "tally"), trace == "tally"
    yes = lambda ok: "yes" if ok else "no"  # noqa: E731
    shown = (lambda what: f": page {what} : ") if evidence else (lambda what: "")  # noqa: E731
    sep = "" if evidence else " "
    type_ok = info.get("r_type", 0) >= 1
    parts = [f"type {goal.get('query') or goal.get('name', '')} {shown(product.get('Title', ''))}{sep}"
             f"{yes(type_ok)}".replace("  ", " ")]
    failed = [] if type_ok else ["type"]
    for a in goal.get("attributes", []):
        ok = attribute_matches(product, [a]) > 0
        parts.append(f"{a} {yes(ok)}")
        failed += [] if ok else [a]
    opts = goal.get("goal_options", {})
    named = opts.items() if isinstance(opts, dict) else [("", v) for v in opts]  # WebShop's files: a plain list
    chosen = list(selected.values())
    for otype, val in named:
        if otype and otype not in product.get("options", {}):
            outcome = f"no {otype} option"
        elif otype and otype not in selected:
            outcome = "not chosen"
        else:
            outcome = yes(option_matches(chosen, [val]) > 0)
        header = f"{otype} ({selected[otype]})" if otype in selected else otype
        quote = shown(header) if evidence and otype in product.get("options", {}) else ""
        parts.append(f"{otype} {val} {quote}{outcome}".strip().replace("  ", " "))
        failed += [] if outcome == "yes" else [f"{otype} {val}".strip()]
    price = f"price under {float(goal.get('price_upper', 0.0)):.2f} "
    quote = shown(fmt_price(product["Price"])) if evidence and "Price" in product else ""
    parts.append(f"{price}{quote}{yes(info.get('r_price', 0) >= 1)}".replace("  ", " "))
    failed += [] if info.get("r_price", 0) >= 1 else ["price"]
    met = int(info.get("n_attr_match", 0) + info.get("n_option_match", 0) + info.get("r_price", 0))
    total = int(info.get("n_attrs", 0) + info.get("n_options", 0) + 1)
    checks = f"buying ends the episode . {' . '.join(parts)} ."
    if not tally:
        return f"{checks} so {met} of {total} are met and the reward is {reward:.2f}"
    if not failed and reward >= 1.0:
        return f"{checks} nothing failed so the reward is {reward:.2f}"
    return (f"{checks} failed : {' , '.join(failed) or 'none'} . so {met} of {total} are met , "
            f"type factor {float(info.get('r_type', 0)):.1f} , and the reward is {reward:.2f}")


def webshop_reasoning(t: Transition, product: dict[str, Any] | None = None, trace: str = "checklist") -> str:
    """The reasoning trace of a real WebShop transition (`WebShopVecEnv.explain`); `product` is the bought
    product for a purchase (without it, or without the goal, a purchase is summarised by its match counts);
    `trace`: checklist | evidence (the purchase checklist quotes the item page) | tally (evidence, and the sum
    spelled out), `purchase_checklist`."""
    info = t.info
    if info.get("invalid"):
        return "the action is not available on this page so the page stays and nothing is bought"
    parsed = parse_action(t.action)
    if parsed is None:
        return "the action is malformed so the page stays"
    kind, arg = parsed
    if kind == "search":
        return f"searching for {arg} lists the best matching products ranked by relevance"
    if arg == "buy now" and product is not None and t.task.goal and "r_type" in info:
        return purchase_checklist(t.task.goal, product, info.get("selected") or {}, info, t.reward, trace)
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
