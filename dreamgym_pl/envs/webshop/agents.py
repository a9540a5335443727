"""WebShop's scripted agents: the oracle (reads the goal: the target product and its options), the noisy
oracle (a random action with probability eps), the random agent (clicks, or searches with 2-4 random
instruction words), the near-miss buyer (the oracle with one deliberate mistake per episode: a listed
product that fails the goal, or an option skipped or swapped; then it buys) and the hasty buyer (the oracle
that often buys before the last wanted option: the webshop presets' demonstrator). `make_webshop_agent` is what
`WebShopVecEnv.scripted_agent` returns.
"""

from __future__ import annotations

import random
import re
from typing import Callable, Sequence

from dreamgym_pl.agents import ScriptedAgent
from dreamgym_pl.core import Observation, Task
from dreamgym_pl.envs.base import SCRIPTED_AGENTS
from dreamgym_pl.envs.webshop.reward import goal_option_values, reward_with_goal_options

_QUERY_DROP = {"i", "need", "am", "looking", "for", "find", "me", "want", "a", "an", "the", "and", "with", "price",
               "lower", "than", "dollars"}


def goal_query(task: Task) -> str:
    """The oracle's search: the goal's attributes, product type and option values (all words of the
    instruction, so a policy can learn to write the same query)."""
    g = task.goal
    if "query" in g and "attributes" in g:
        return " ".join(list(g["attributes"]) + [g["query"]] + goal_option_values(task.goal))
    words = [w for w in re.findall(r"[a-z][a-z\-]*", task.instruction.lower()) if w not in _QUERY_DROP]
    return " ".join(words[:8])


_CONTROLS = ("back to search", "next >", "< prev", "description", "features", "reviews", "buy now")
WEBSHOP_AGENTS = SCRIPTED_AGENTS + ("near_miss", "hasty")


def selected_options(page: str) -> set[str]:
    """The option values an item page shows as chosen (`size (pack of 12):`)."""
    return set(re.findall(r"\(([^()]*)\):", page))


def buy_with_a_wanted_option(wanted: set[str], obs: Observation) -> bool:
    """An item page where `buy now` is admissible and at least one wanted option value is chosen: where the hasty
    buyer may buy before its last option (and where `experiments/diagnostics/webshop_decision_margins.py` asks a policy)."""
    return "click[buy now]" in obs.admissible and bool(wanted & selected_options(obs.text))


def _click_target(a: str) -> str:
    return a[len("click["):-1] if a.startswith("click[") else a


class WebShopRandomAgent(ScriptedAgent):
    """Searches with 2-4 random instruction words or clicks a random element (even odds when both are
    possible); uniform over the admissible actions of a page that offers neither."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def act_one(self, slot: int, obs: Observation) -> str:
        if obs.admissible and not any(a.startswith(("click[", "search[")) for a in obs.admissible):
            return self.rng.choice(obs.admissible)
        clicks = [a for a in obs.admissible if a.startswith("click[")]
        can_search = any(a.startswith("search[") for a in obs.admissible)
        if can_search and (not clicks or self.rng.random() < 0.5):
            words = re.findall(r"[a-z]+", self.tasks[slot].instruction.lower()) or ["item"]
            return "search[" + " ".join(self.rng.sample(words, min(len(words), self.rng.randint(2, 4)))) + "]"
        if not clicks:
            return "click[back to search]"
        return self.rng.choice(clicks)


class WebShopOracle(ScriptedAgent):
    """Searches with the goal words, clicks the first listed product that fully satisfies the goal (judged
    from the catalogue when it has one, else the goal's own product), pages on when none does, picks the
    goal options and buys. Choosing among visible results, not hunting one hidden id, keeps the
    demonstrations learnable from what a policy sees."""

    name = "oracle"

    def __init__(self, max_pages: int = 5, catalogue: dict[str, dict] | None = None):
        self.max_pages = max_pages
        self.catalogue = catalogue
        self._ok: dict[tuple[str, str], bool] = {}

    def _satisfies(self, asin: str, task: Task) -> bool:
        g = task.goal
        if asin == g.get("asin"):
            return True
        if self.catalogue is None or asin not in self.catalogue:
            return False
        key = (asin, task.task_id)
        if key not in self._ok:
            self._ok[key] = reward_with_goal_options(self.catalogue[asin], g) >= 1.0 - 1e-9
        return self._ok[key]

    def begin(self, tasks: Sequence[Task]) -> None:
        super().begin(tasks)
        self.pages = [0] * len(self.tasks)

    def act_one(self, slot: int, obs: Observation) -> str:
        task = self.tasks[slot]
        adm = obs.admissible
        targets = [_click_target(a) for a in adm]
        if any(a.startswith("search[") for a in adm):
            return f"search[{goal_query(task)}]"
        for t in targets:
            if t not in ("back to search", "next >", "< prev") and self._satisfies(obs.refs.get(t, t), task):
                return f"click[{t}]"
        if "buy now" in targets:
            selected = selected_options(obs.text)
            for v in goal_option_values(task.goal):
                if v in targets and v not in selected:
                    return f"click[{v}]"
            return "click[buy now]"
        if "description" in targets or targets == ["back to search", "< prev"]:
            return "click[< prev]"
        if "next >" in targets and self.pages[slot] < self.max_pages - 1:
            self.pages[slot] += 1
            return "click[next >]"
        products = [t for t in targets if t not in ("back to search", "next >", "< prev")]
        if products:
            return f"click[{products[0]}]"
        return "click[back to search]"


class NoisyOracle(ScriptedAgent):
    """The oracle with probability 1 - eps, the random agent (seeded seed + 1) otherwise (mixed-quality data)."""

    name = "noisy_oracle"

    def __init__(self, eps: float = 0.3, seed: int = 0, catalogue: dict[str, dict] | None = None):
        if not 0.0 <= eps <= 1.0:
            raise ValueError("agent eps must lie in [0, 1]")
        self.eps = eps
        self.rng = random.Random(seed)
        self.oracle = WebShopOracle(catalogue=catalogue)
        self.random = WebShopRandomAgent(seed + 1)

    def begin(self, tasks: Sequence[Task]) -> None:
        super().begin(tasks)
        self.oracle.begin(tasks)
        self.random.begin(tasks)

    def act_one(self, slot: int, obs: Observation) -> str:
        if self.rng.random() < self.eps:
            return self.random.act_one(slot, obs)
        return self.oracle.act_one(slot, obs)


class HastyBuyer(ScriptedAgent):
    """The oracle that, on goals asking for two or more options, buys right after the first wanted option it
    clicks with probability `skip` (drawn once per episode; a fixed 0.65 for `make_webshop_agent`): imperfect
    demonstrations whose one habit, buying before the last option, costs the purchase its full reward (the score
    drops to 0.75-0.8) and is visible in the instruction and on the item page, so a policy cloned from them can
    learn to drop it from reward alone. Where the product offers at most one wanted option it acts as the oracle."""

    name = "hasty"

    def __init__(self, skip: float = 0.65, seed: int = 0, catalogue: dict[str, dict] | None = None):
        if not 0.0 <= skip <= 1.0:
            raise ValueError("hasty skip must lie in [0, 1]")
        self.skip = skip
        self.rng = random.Random(seed)
        self.oracle = WebShopOracle(catalogue=catalogue)

    def begin(self, tasks: Sequence[Task]) -> None:
        super().begin(tasks)
        self.oracle.begin(tasks)
        self.hasty = [len(goal_option_values(t.goal)) >= 2 and self.rng.random() < self.skip for t in self.tasks]

    def act_one(self, slot: int, obs: Observation) -> str:
        if self.hasty[slot] and buy_with_a_wanted_option(set(goal_option_values(self.tasks[slot].goal)), obs):
            return "click[buy now]"
        return self.oracle.act_one(slot, obs)


def near_miss_action(clicks: Sequence[str], wanted: Sequence[str], selected: set[str], mistake: str,
                     skipped: str | None, swap: str | None, satisfies: Callable[[str], bool]) -> str | None:
    """The near-miss buyer's action given a page's click targets, or None where it acts as the oracle.
    mistake "product": on a results page, the first listed product that fails the goal (`satisfies(target)`
    false); mistake "option": on the product page, `swap` (an unwanted value, clicked once; None: none) and
    the wanted values except `skipped`, then "buy now"."""
    if "buy now" in clicks:
        if mistake != "option":
            return None
        if swap is not None and swap in clicks:
            return f"click[{swap}]"
        for v in wanted:
            if v != skipped and v in clicks and v not in selected:
                return f"click[{v}]"
        return "click[buy now]"
    if mistake == "product":
        for t in clicks:
            if t not in _CONTROLS and not satisfies(t):
                return f"click[{t}]"
    return None


class NearMissBuyer(ScriptedAgent):
    """Failed purchases near the success boundary, which the oracles rarely make and a policy makes most:
    per episode one planned mistake, drawn with even odds where the goal has options: a listed product that
    fails the goal (bought with the goal's options), or the product the oracle picks (the first listed one
    that satisfies the goal) with one wanted option skipped (half of the time an unwanted value clicked
    first). Otherwise the oracle's actions (search, paging, buying); an episode whose mistake finds no place
    (every listed product satisfies the goal; the skipped value is not offered) succeeds, ~6% of them."""

    name = "near_miss"

    def __init__(self, seed: int = 0, catalogue: dict[str, dict] | None = None):
        self.rng = random.Random(seed)
        self.oracle = WebShopOracle(catalogue=catalogue)

    def begin(self, tasks: Sequence[Task]) -> None:
        super().begin(tasks)
        self.oracle.begin(tasks)
        self.plans: list[tuple[str, str | None]] = []
        self.swap_pending: list[bool] = []
        for task in self.tasks:
            wanted = goal_option_values(task.goal)
            option = bool(wanted) and self.rng.random() < 0.5
            self.plans.append(("option", self.rng.choice(wanted)) if option else ("product", None))
            self.swap_pending.append(option and self.rng.random() < 0.5)

    def act_one(self, slot: int, obs: Observation) -> str:
        task = self.tasks[slot]
        mistake, skipped = self.plans[slot]
        if any(a.startswith("search[") for a in obs.admissible):
            return self.oracle.act_one(slot, obs)
        clicks = [_click_target(a) for a in obs.admissible if a.startswith("click[")]
        wanted = goal_option_values(task.goal)
        swap = None
        if mistake == "option" and self.swap_pending[slot] and "buy now" in clicks:
            self.swap_pending[slot] = False
            others = [t for t in clicks if t not in _CONTROLS and t not in wanted]
            swap = self.rng.choice(others) if others else None
        selected = selected_options(obs.text)
        act = near_miss_action(clicks, wanted, selected, mistake, skipped, swap,
                               lambda t: self.oracle._satisfies(obs.refs.get(t, t), task))
        return act if act is not None else self.oracle.act_one(slot, obs)


def make_webshop_agent(name: str, seed: int = 0, eps: float = 0.3,
                       catalogue: dict[str, dict] | None = None) -> ScriptedAgent:
    """oracle / noisy_oracle / random / near_miss / hasty; `catalogue` (asin -> product) lets the oracles judge
    listed products."""
    if name == "oracle":
        return WebShopOracle(catalogue=catalogue)
    if name == "noisy_oracle":
        return NoisyOracle(eps, seed, catalogue)
    if name == "random":
        return WebShopRandomAgent(seed)
    if name == "near_miss":
        return NearMissBuyer(seed, catalogue)
    if name == "hasty":
        return HastyBuyer(seed=seed, catalogue=catalogue)
    raise KeyError(f"unknown scripted agent {name!r}; known: {list(WEBSHOP_AGENTS)}")
