"""The agent prompt and action extraction (pure functions).

Prompt = task instruction, the last H (observation, action) pairs, the current observation, optionally
the admissible actions, then `action :`. With `think` (real LLMs) the model is given the environment's
instructions and asked for `<think>...</think><action>...</action>`; a missing action tag leaves the raw
text, which the env counts as invalid. Tiny models answer with the bare action, cut after the first of the
environment's stop strings (`action_stop`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from dreamgym_pl.core import Observation, Task
from dreamgym_pl.rollout.sampling import cut_at_stop

THINK_INSTRUCTION = "Think step by step inside <think> </think>, then give one admissible action inside <action> </action>."
# the words of the agent prompt's frame (the tiny tokenizer is trained on them)
PROMPT_WORDS = "<think> </think> <action> </action> task : did : seen : observation : admissible : action :"
ACTION_CUE = "action :"  # the agent prompt's last line: the model writes the action after it
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


@dataclass
class PromptConfig:
    """The agent prompt (documented in conf/config.yaml, `prompt:`); `instructions` comes from the env."""

    history: int = 2
    history_obs_words: int = 0
    show_admissible: bool = False
    max_obs_words: int = 160
    think: bool = False
    max_tokens: int = 1024        # prompt tokens kept (the oldest are cut) in training and generation
    instructions: str = ""        # the environment's system instruction (Environment.instructions)


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
        parts.append(f"{cfg.instructions} {THINK_INSTRUCTION}".strip())
    parts.append(f"task : {task.instruction}")
    parts += history_lines(history, cfg.history, cfg.history_obs_words)
    parts.append(f"observation : {truncate_words(obs.text, cfg.max_obs_words)}")
    if cfg.show_admissible and obs.admissible:
        parts.append("admissible : " + " , ".join(obs.admissible))
    parts.append(ACTION_CUE)
    return " \n".join(parts)


def extract_action(text: str, stop: Sequence[str], think: bool = False) -> str:
    """The action in a model response: the <action> tag's content, else the text up to and including the
    first stop string."""
    m = _ACTION_TAG.search(text)
    if m:
        return m.group(1).strip()
    if think:
        return text.strip()
    return cut_at_stop(text, stop)[0].strip()
