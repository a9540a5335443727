"""The agent prompt and action extraction (pure functions).

Prompt = task instruction, the last H (observation, action) pairs, the current observation, optionally
the admissible actions, then `action :`. With `think` (real LLMs) the model is asked for
`<think>...</think><action>...</action>`; a missing action tag leaves the raw text, which the env counts
as invalid. Tiny models answer with the bare action (`click [ b0x1y2 ]`), cut after the first `]`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from dreamgym_pl.core import Observation, Task

THINK_INSTRUCTION = ("You are a web shopping agent. Think step by step inside <think> </think>, then give one "
                     "admissible action inside <action> </action>.")
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


@dataclass
class PromptConfig:
    history: int = 2
    history_obs_words: int = 0
    show_admissible: bool = False
    max_obs_words: int = 160
    think: bool = False


def truncate_words(text: str, n: int) -> str:
    words = text.split()
    return text if len(words) <= n else " ".join(words[:n]) + " ..."


def history_lines(history: Sequence[tuple[str, str]], n: int, obs_words: int) -> list[str]:
    """The last n (observation, action) pairs as `seen : ...` / `did : ...` lines (shared by the agent and
    experience-model prompts)."""
    lines = []
    for o, a in (list(history)[-n:] if n > 0 else []):
        if obs_words > 0:
            lines.append(f"seen : {truncate_words(o, obs_words)}")
        lines.append(f"did : {a}")
    return lines


def build_prompt(task: Task, history: Sequence[tuple[str, str]], obs: Observation, cfg: PromptConfig) -> str:
    parts = []
    if cfg.think:
        parts.append(THINK_INSTRUCTION)
    parts.append(f"task : {task.instruction}")
    parts += history_lines(history, cfg.history, cfg.history_obs_words)
    parts.append(f"observation : {truncate_words(obs.text, cfg.max_obs_words)}")
    if cfg.show_admissible and obs.admissible:
        parts.append("admissible : " + " , ".join(obs.admissible))
    parts.append("action :")
    return " \n".join(parts)


def extract_action(text: str, think: bool = False) -> str:
    """The action in a model response: the <action> tag's content, else the text up to the first `]`."""
    m = _ACTION_TAG.search(text)
    if m:
        return m.group(1).strip()
    if think:
        return text.strip()
    i = text.find("]")
    return (text[: i + 1] if i >= 0 else text).strip()


def canonical_action(action: str) -> str:
    """`click [ next > ]` -> `click[next >]`: the detokenised form normalised for logs and history."""
    m = re.match(r"^\s*(\w+)\s*\[(.*)\]\s*$", action, re.DOTALL)
    if not m:
        return " ".join(action.split())
    return f"{m.group(1).lower()}[{' '.join(m.group(2).split())}]"
