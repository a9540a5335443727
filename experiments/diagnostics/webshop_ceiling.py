"""What WebShop lets a policy reach from what it sees: on the oracle's search (the goal query; 5 result pages), the
success of scripted choices that read only the page: always result 1; the first result within the price bound; the
first within the bound whose item page offers every goal option (the options are selected and the product bought,
as the oracle does). The gap between these and a policy's success is execution, not hidden information.

    python experiments/diagnostics/webshop_ceiling.py [--split val] [--tasks 200] [--results-per-page 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dreamgym_pl.envs.webshop.agents import goal_query  # noqa: E402
from dreamgym_pl.envs.webshop.reward import goal_option_values, reward_with_goal_options  # noqa: E402


bought_reward = reward_with_goal_options  # buying a product with every goal option it offers selected


def offers_goal_options(product: dict[str, Any], goal: dict[str, Any]) -> bool:
    offered = {v for vals in product.get("options", {}).values() for v in vals}
    return all(v in offered for v in goal_option_values(goal))


RULES: dict[str, Callable[[dict[str, Any], dict[str, Any]], bool]] = {
    "result 1": lambda p, g: True,
    "first within the price bound": lambda p, g: p["Price"] <= g["price_upper"],
    "first within the bound offering the goal options": lambda p, g: p["Price"] <= g["price_upper"]
    and offers_goal_options(p, g),
}


def rule_success(results: list[dict[str, Any]], goal: dict[str, Any], rule: Callable) -> bool:
    """Whether buying the first result the rule accepts succeeds (False when it accepts none)."""
    chosen = next((p for p in results if rule(p, goal)), None)
    return chosen is not None and bought_reward(chosen, goal) >= 1.0 - 1e-9


def main() -> None:
    from dreamgym_pl.envs import make_vec_env

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="val", choices=["train", "val", "test"])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--pages", type=int, default=5)
    ap.add_argument("--results-per-page", type=int, default=3, help="3: env=webshop_tiny (the embedded default)")
    args = ap.parse_args()
    e = make_vec_env("webshop", results_per_page=args.results_per_page).engine
    tasks = e.tasks(args.split)[: args.tasks]
    wins = dict.fromkeys(["any listed product (the oracle)", *RULES], 0)
    for t in tasks:
        results = [e.products[i] for i in e.search_engine.search(goal_query(t))[: args.pages * e.results_per_page]]
        wins["any listed product (the oracle)"] += any(bought_reward(p, t.goal) >= 1.0 - 1e-9 for p in results)
        for name, rule in RULES.items():
            wins[name] += rule_success(results, t.goal, rule)
    print(f"{len(tasks)} {args.split} goals, the goal query's first {args.pages} pages:")
    for k, v in wins.items():
        print(f"  {v / len(tasks):.3f}  {k}")


if __name__ == "__main__":
    main()
