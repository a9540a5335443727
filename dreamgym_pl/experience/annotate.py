"""Reasoning traces for offline transitions (the teacher traces R*_t of the paper's Eq. 5).

- `rule_based_reasoning`: from the environment's ground truth. WebShop: what the action did, and for a
  purchase which goal attributes / options / price the product met and the resulting reward. TextWorld /
  ALFWorld: what the command changed and why the score moved (`envs/textworld.textworld_reasoning`).
- `TeacherAnnotator`: a teacher LLM through a GenerationEngine, for environments without ground truth; its
  prompt gives the task, the success flag and the trajectory and asks for a one-line explanation per step.
"""

from __future__ import annotations

from typing import Sequence

from dreamgym_pl.core import Trajectory, Transition
from dreamgym_pl.envs.webshop.env import parse_action
from dreamgym_pl.rollout.engine import GenerationEngine, SamplingParams


def rule_based_reasoning(t: Transition) -> str:
    """The ground-truth reasoning trace of a transition, by environment (task id prefix)."""
    if t.task.task_id.startswith(("tw-", "alfworld-")):
        from dreamgym_pl.envs.textworld import textworld_reasoning

        return textworld_reasoning(t)
    if t.task.task_id.startswith(("miniwob-", "webarena-")):
        from dreamgym_pl.envs.browser import browser_reasoning

        return browser_reasoning(t)
    return webshop_reasoning(t)


def webshop_reasoning(t: Transition) -> str:
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


def annotate(trajs: Sequence[Trajectory]) -> None:
    """Fill empty `reasoning` fields in place with rule-based traces."""
    for traj in trajs:
        for t in traj.transitions:
            if not t.reasoning:
                t.reasoning = rule_based_reasoning(t)


TEACHER_PROMPT = ("You explain an agent's interaction with an environment.\nTask: {task}\nOutcome: {outcome}\n"
                  "Trajectory:\n{steps}\nFor step {i}, explain in one sentence why the action led to the next "
                  "state and reward.\nExplanation:")


class TeacherAnnotator:
    """Per-step reasoning from a teacher LLM (for environments without ground truth)."""

    def __init__(self, engine: GenerationEngine, max_new_tokens: int = 64):
        self.engine = engine
        self.params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=["\n"])

    def annotate(self, trajs: Sequence[Trajectory]) -> None:
        prompts, slots = [], []
        for traj in trajs:
            steps = "\n".join(f"{j}. state: {t.state.text[:300]} | action: {t.action} | reward: {t.reward}"
                              for j, t in enumerate(traj.transitions))
            for j, t in enumerate(traj.transitions):
                prompts.append(TEACHER_PROMPT.format(task=traj.task.instruction,
                                                     outcome="success" if traj.success else "failure", steps=steps, i=j))
                slots.append(t)
        for t, c in zip(slots, self.engine.generate(prompts, self.params)):
            t.reasoning = " ".join(c.text.split()) or rule_based_reasoning(t)
