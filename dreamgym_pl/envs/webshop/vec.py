"""WebShop as an `Environment` (the pipeline's contract): batched `WebShopEnv` episodes over one shared
`WebShopEngine`, with WebShop's scripted agents, reasoning traces, tokenizer corpus and admissibility rule.
Registered as `env.name: webshop`."""

from __future__ import annotations

import re
from typing import Any, Sequence

from dreamgym_pl.core import Observation, Task, Transition
from dreamgym_pl.envs.base import SerialVecEnv, action_key, register, root_goal
from dreamgym_pl.envs.webshop.agents import WEBSHOP_AGENTS, make_webshop_agent
from dreamgym_pl.envs.webshop.ending_rules import ending_check
from dreamgym_pl.envs.webshop.env import SEP, WebShopEngine, WebShopEnv, get_engine
from dreamgym_pl.envs.webshop.goals import goal_type, products_by_type, variation_problem
from dreamgym_pl.envs.webshop.reasoning import TRACES, webshop_reasoning
from dreamgym_pl.envs.webshop.search import product_text

# page controls and action forms the tokenizer must know besides the product texts
CORPUS_ACTIONS = ("click[back to search]", "click[next >]", "click[< prev]", "click[buy now]", "search[x]")
INVALID_NOTE = re.compile(r"^\s*invalid action\s*:.*?\[SEP\]\s*", re.IGNORECASE | re.DOTALL)


class WebShopVecEnv(SerialVecEnv):
    """Batched WebShop episodes; `engine` is the shared catalogue, search index and goals."""

    instructions = "You are a web shopping agent."
    action_stop = ("]",)
    atomic_words = ("[SEP]",)

    def __init__(self, engine: WebShopEngine, max_steps: int = 15, show_instruction: bool = True,
                 product_ids: str = "asin", trace: str = "checklist"):
        # validates the arguments now
        WebShopEnv(engine, max_steps, show_instruction, product_ids)
        if trace not in TRACES:
            raise ValueError(f"env.trace must be one of {TRACES}, got {trace!r}")
        self.trace = trace
        self.engine = engine
        self._env_args = (max_steps, show_instruction, product_ids)
        super().__init__(self._new_env, engine.tasks, max_steps)
        self._by_type = products_by_type(engine.products)

    def _new_env(self) -> WebShopEnv:
        return WebShopEnv(self.engine, *self._env_args)

    def scripted_agent(self, name: str, seed: int = 0, eps: float = 0.3) -> Any:
        """oracle / noisy_oracle / random / near_miss / hasty (`envs/webshop/agents.py`); the oracles judge listed
        products with the catalogue."""
        catalogue = {p["asin"]: p for p in self.engine.products}
        return make_webshop_agent(name, seed, eps, catalogue)

    def explain(self, t: Transition) -> str:
        """What the action did; for a purchase, each goal requirement checked against the bought product."""
        i = self.engine.by_asin.get(t.info.get("asin", ""))
        return webshop_reasoning(t, self.engine.products[i] if i is not None else None, self.trace)

    def corpus(self) -> list[str]:
        """The product texts (titles, attributes, options, bullet points), then the page controls."""
        return [product_text(p) for p in self.engine.products] + list(CORPUS_ACTIONS)

    def is_admissible(self, action: str, obs: Observation) -> bool:
        """Listed (spacing- and case-insensitive), or any search where a search is possible."""
        if not obs.admissible:
            return True
        key = action_key(action)
        for a in obs.admissible:
            k = action_key(a)
            if k == key or (k.startswith("search[") and key.startswith("search[")):
                return True
        return False

    def invalid_observation(self, obs: Observation, action: str) -> Observation:
        """The page again, headed by WebShop's note (`invalid action: ...`), which replaces an earlier note."""
        page = INVALID_NOTE.sub("", obs.text, count=1)
        return Observation(f"invalid action: {action.strip()[:80]}{SEP}{page}", list(obs.admissible), dict(obs.refs))

    def ending_check(self, task: Task, history: Sequence[tuple[str, str]]) -> str | None:
        """A purchase missing an option the instruction asks for (not clicked since the product was opened) or
        bought on a page showing a price above the bound, or an ending other than `buy now` (`ending_rules.py`)."""
        return ending_check(task.instruction, history)

    def initial_observation(self, task: Task) -> Observation:
        """The search page of `task`, from a fresh single env (the batch slots are left alone)."""
        return self._new_env().reset(task)

    def task_family(self, task: Task) -> str:
        """The goal's product type (its query): a variation asks for the same kind of product with other
        attributes, options or price bound."""
        return goal_type(root_goal(task.goal))

    def check_generated_task(self, instruction: str, seed: Task) -> str | None:
        """A well-formed variation reads back into a goal (`goals.parse_instruction`) of the seed's product type,
        with attributes and options the catalogue knows for that type, a numeric price bound, and at least one
        product of the catalogue fulfilling it."""
        return variation_problem(instruction, root_goal(seed.goal), self._by_type)


@register("webshop", scripted_agents=WEBSHOP_AGENTS)
def make_webshop(max_steps: int = 15, show_instruction: bool = True, product_ids: str = "asin",
                 trace: str = "checklist", **engine_kwargs: Any) -> WebShopVecEnv:
    return WebShopVecEnv(get_engine(**engine_kwargs), max_steps, show_instruction, product_ids, trace)
