"""Scripted MiniWoB++ agents over the reduced accessibility tree of envs/browser.py: the per-task oracle
(`miniwob_oracle_action`: the next action of a scripted solution, read from the utterance and the tree), its
batched noisy form and the random agent. Also the reading of the reduced tree's element lines, which the
browser environment shares (it imports them from here; this module imports nothing from it).
"""

from __future__ import annotations

import random
import re
from typing import Sequence

from dreamgym_pl.core import Observation, Task

FILLABLE = {"textbox", "searchbox", "combobox", "spinbutton"}
_LINE = re.compile(r"^\[(\w+)\]\s+(\w+)\s*(?:'((?:[^'\\]|\\.)*)')?(.*)$")


# ----- the reduced tree's elements -------------------------------------------------------------------
def elements(tree: str) -> list[tuple[str, str, str]]:
    """(bid, role, name) of the reduced tree's elements."""
    res = []
    for line in tree.split("\n"):
        m = _LINE.match(line)
        if m:
            res.append((m.group(1), m.group(2), (m.group(3) or "").replace("\\'", "'")))
    return res


def quoted(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


# ----- scripted oracles ------------------------------------------------------------------------------
def _by(tree: str, role: set[str] | str, name: str | None = None) -> list[str]:
    roles = {role} if isinstance(role, str) else role
    return [b for b, r, n in elements(tree) if r in roles and (name is None or n.strip().lower() == name.lower())]


def _submit(tree: str, label: str = "submit") -> str:
    b = _by(tree, "button", label) or _by(tree, "button")
    return f"click('{b[-1]}')" if b else "noop()"


def miniwob_oracle_action(task: str, goal: str, tree: str, done: list[str]) -> str:
    """The next action of a scripted solution from the utterance, the tree and the actions already taken."""
    q = quoted(goal)
    if task == "click-button":
        return f"click('{_by(tree, 'button', q[0])[0]}')"
    if task == "click-button-sequence":
        names = re.findall(r"button (\w+)", goal)
        return f"click('{_by(tree, 'button', names[min(len(done), len(names) - 1)])[0]}')"
    if task == "click-dialog":
        return f"click('{(_by(tree, 'button', 'close') or _by(tree, 'button'))[0]}')"
    if task == "click-tab":
        m = re.search(r"Tab #\d+", goal)
        return f"click('{(_by(tree, 'link', m.group(0)) or _by(tree, 'tab', m.group(0)))[0]}')"
    if task == "focus-text":
        return f"click('{_by(tree, FILLABLE)[0]}')"
    if task in ("click-checkboxes", "click-option"):
        m = re.search(r"Select (.*?) and click Submit", goal)
        wanted = [w.strip() for w in re.split(r",\s*", m.group(1))] if m and m.group(1).strip() != "nothing" else []
        role = "checkbox" if task == "click-checkboxes" else "radio"
        for w in wanted:
            b = _by(tree, role, w)
            if b and f"click('{b[0]}')" not in done:
                return f"click('{b[0]}')"
        return _submit(tree)
    if task in ("enter-text", "enter-password", "login-user"):
        boxes = _by(tree, FILLABLE)
        texts = q if task == "login-user" else [q[0]] * (2 if task == "enter-password" else 1)
        for b, t in zip(boxes, texts):
            if not any(a.startswith(f"fill('{b}'") for a in done):
                return f"fill('{b}', '{t}')"
        return _submit(tree, "login" if task == "login-user" else "submit")
    raise KeyError(f"no scripted oracle for MiniWoB task {task!r}")


class MiniWoBOracle:
    """Batched scripted oracle (noisy with probability eps: a random admissible click instead)."""

    def __init__(self, eps: float = 0.0, seed: int = 0, name: str = "oracle"):
        self.eps, self.rng, self.name = eps, random.Random(seed), name

    def begin(self, tasks: Sequence[Task]) -> None:
        self.tasks = list(tasks)
        self.done: list[list[str]] = [[] for _ in tasks]

    def act(self, observations: Sequence[Observation | None]) -> list[str | None]:
        out: list[str | None] = []
        for i, o in enumerate(observations):
            if o is None:
                out.append(None)
                continue
            clicks = [a for a in o.admissible if a.startswith("click(")]
            if self.eps > 0 and clicks and self.rng.random() < self.eps:
                a = self.rng.choice(clicks)
            else:
                tree = o.text.split("\n", 1)[1] if "\n" in o.text else ""
                try:
                    a = miniwob_oracle_action(self.tasks[i].goal["task"], o.refs.get("goal", ""), tree, self.done[i])
                except (IndexError, KeyError, AttributeError):
                    a = self.rng.choice(clicks) if clicks else "noop()"
            self.done[i].append(a)
            out.append(a)
        return out


class RandomBrowserAgent(MiniWoBOracle):
    def __init__(self, seed: int = 0):
        super().__init__(1.0, seed, "random")
