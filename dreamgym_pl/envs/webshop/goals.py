"""WebShop-style synthetic goals and the fixed train/val/test split.

A goal names a target product's type, a few of its attributes, one value of each of its options and a
price bound drawn from the multiples of 10 just above its price, as WebShop's synthetic goals do. The split
depends only on the catalogue and the goal seed: test = the first `num_test` goals, val = the next `num_val`,
train = the rest, so worker seeds or counts never change which goals are held out (and growing `num_val`
never moves a test goal).
"""

from __future__ import annotations

import random
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
