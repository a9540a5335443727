"""WebShop-style synthetic goals and the fixed train/val/test split.

A goal names a target product's type, a few of its attributes, one value of each of its options and a
price bound drawn from the multiples of 10 just above its price, as WebShop's synthetic goals do. The split
depends only on the catalogue and the goal seed: test = the first `num_test` goals, val = the next `num_val`,
train = the rest, so worker seeds or counts never change which goals are held out (and growing `num_val`
never moves a test goal).
"""

from __future__ import annotations

import random
import re
from typing import Any

from dreamgym_pl.core import Task

TEMPLATES = [
    "i need {attrs} {ptype}{opts}, and price lower than {price:.2f} dollars",
    "i am looking for {attrs} {ptype}{opts}, and price lower than {price:.2f} dollars",
    "find me {attrs} {ptype}{opts}, and price lower than {price:.2f} dollars",
    "i want {attrs} {ptype}{opts}, and price lower than {price:.2f} dollars",
]


def price_bounds(price: float, n: int = 3) -> list[float]:
    """The first n multiples of 10 strictly above the price."""
    first = (int(price) // 10 + 1) * 10
    return [float(first + 10 * i) for i in range(n)]


def instruction_text(ptype: str, attrs: list[str], options: dict[str, str], price_upper: float, template: int) -> str:
    a = " and ".join(attrs)
    o = ""
    if options:
        o = " with " + ", and ".join(f"{k}: {v}" for k, v in options.items())
    return TEMPLATES[template % len(TEMPLATES)].format(attrs=a, ptype=ptype, opts=o, price=price_upper)


def make_goal(product: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    attrs = product["Attributes"]
    k = min(len(attrs), rng.randint(1, 2))
    goal_attrs = rng.sample(attrs, k) if attrs else []
    goal_options = {t: rng.choice(v) for t, v in product["options"].items() if v}
    price_upper = rng.choice(price_bounds(product["Price"]))
    ptype = product["query"] or product["name"]
    return {
        "asin": product["asin"],
        "instruction_text": instruction_text(ptype, goal_attrs, goal_options, price_upper, rng.randrange(len(TEMPLATES))),
        "attributes": goal_attrs,
        "goal_options": goal_options,
        "price_upper": price_upper,
        "query": product["query"],
        "category": product["category"],
        "product_category": product["product_category"],
        "name": product["name"],
    }


def generate_goals(products: list[dict[str, Any]], goals_per_product: int = 2, seed: int = 0) -> list[Task]:
    rng = random.Random(seed)
    goals = [make_goal(p, rng) for p in products for _ in range(goals_per_product)]
    rng.shuffle(goals)
    return [Task(task_id=f"webshop-{i}", instruction=g["instruction_text"], goal=g) for i, g in enumerate(goals)]


def split_goals(goals: list[Task], split: str, num_test: int, num_val: int = 0) -> list[Task]:
    """test = goals[:num_test], val = goals[num_test:num_test + num_val], train = the rest; all = every goal."""
    if split == "test":
        return goals[:num_test]
    if split == "val":
        return goals[num_test:num_test + num_val]
    if split == "train":
        return goals[num_test + num_val:]
    if split == "all":
        return list(goals)
    raise ValueError(f"unknown split {split!r} (train, val, test, all)")


# ----- reading an instruction back into a goal (the check of curriculum-generated tasks) ------------------
PREFIXES = tuple(t.split(" {attrs}")[0] for t in TEMPLATES)
_SHAPE = re.compile(r"^(?:%s) (?P<head>.+?)(?: with (?P<opts>.+))?, and price lower than (?P<price>.+?) dollars$"
                    % "|".join(re.escape(p) for p in PREFIXES))
_NUMBER = re.compile(r"^\d+(?:\.\d+)?$")


def goal_type(goal: dict[str, Any]) -> str:
    """A goal's product type, as its instruction names it (`make_goal`: the product's query, else its name)."""
    return str(goal.get("query") or goal.get("name") or "")


def products_by_type(products: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Lower-cased product type -> the catalogue's products of that type."""
    out: dict[str, list[dict[str, Any]]] = {}
    for p in products:
        out.setdefault((p["query"] or p["name"]).lower(), []).append(p)
    return out


def split_known(text: str, known: set[str]) -> list[str] | None:
    """`text` read as known phrases joined by " and " (a phrase may itself hold "and": "plug and play");
    [] for empty text, None when no reading exists."""
    if not text:
        return []
    for a in sorted(known, key=len, reverse=True):
        if text == a:
            return [a]
        if text.startswith(a + " and "):
            rest = split_known(text[len(a) + 5:], known)
            if rest is not None:
                return [a] + rest
    return None


def parse_instruction(text: str, ptype: str, products: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """Read an instruction (lower case, detokenised) back into a goal of product type `ptype`, with the
    attributes and options the catalogue's `products` of that type know: ({"query", "attributes",
    "goal_options", "price_upper"}, None), or (None, why it is not such a goal)."""
    text, ptype = " ".join(text.lower().split()), ptype.lower()
    m = _SHAPE.match(text)
    if not m:
        return None, "not of the form '<prefix> <attributes> <type> [with <options>], and price lower than <x> dollars'"
    head, price = m.group("head"), m.group("price")
    if head != ptype and not head.endswith(" " + ptype):
        return None, f"not a {ptype}: {head!r}"
    if not _NUMBER.match(price) or float(price) <= 0:
        return None, f"price {price!r} is not a positive number"
    known_attrs = {a.lower() for p in products for a in p["Attributes"]}
    attrs = split_known(head[:-len(ptype)].strip(), known_attrs)
    if attrs is None:
        return None, f"unknown attributes {head[:-len(ptype)].strip()!r} for {ptype}"
    known_opts: dict[str, set[str]] = {}
    for p in products:
        for k, vs in p["options"].items():
            known_opts.setdefault(k.lower(), set()).update(v.lower() for v in vs)
    options: dict[str, str] = {}
    for part in (m.group("opts").split(", and ") if m.group("opts") else []):
        k, sep, v = part.partition(": ")
        if not sep or v not in known_opts.get(k, set()) or k in options:
            return None, f"option {part!r} is not one of a {ptype}'s"
        options[k] = v
    return {"query": ptype, "attributes": attrs, "goal_options": options, "price_upper": float(price)}, None


def feasible(goal: dict[str, Any], products: list[dict[str, Any]]) -> bool:
    """Whether one of `products` has every attribute and option value of `goal` at a price within its bound."""
    for p in products:
        attrs = {a.lower() for a in p["Attributes"]}
        opts = {k.lower(): {v.lower() for v in vs} for k, vs in p["options"].items()}
        if (set(goal["attributes"]) <= attrs and all(v in opts.get(k, ()) for k, v in goal["goal_options"].items())
                and float(p["Price"]) <= goal["price_upper"]):
            return True
    return False


def variation_problem(instruction: str, seed_goal: dict[str, Any],
                      by_type: dict[str, list[dict[str, Any]]]) -> str | None:
    """Why `instruction` is not a grounded variation of `seed_goal` (another product type, unknown attributes
    or options, a price that is no number, no product of the catalogue fulfilling it), or None."""
    ptype = goal_type(seed_goal).lower()
    goal, why = parse_instruction(instruction, ptype, by_type.get(ptype, []))
    if goal is None:
        return why
    if not feasible(goal, by_type.get(ptype, [])):
        return f"no {ptype} of the catalogue fulfils it"
    return None
