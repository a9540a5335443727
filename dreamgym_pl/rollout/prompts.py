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
from typing import Any, Sequence

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
    chat_template: Any = "auto"   # auto | true | false: the prompt as one user turn of the tokenizer's chat template


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


CHAT_TEMPLATE_MODES = ("auto", True, False)  # prompt.chat_template


def uses_chat_template(tokenizer: Any, mode: Any = "auto") -> bool:
    """Whether policy prompts go through `tokenizer`'s chat template: `auto` where the tokenizer has one (Instruct
    models; the tiny word tokenizer has none, so model=tiny's prompts stay the raw text), true (an error without
    one), false (never)."""
    if mode not in CHAT_TEMPLATE_MODES:
        raise ValueError(f"prompt.chat_template: {mode!r} is not one of auto, true, false")
    has = bool(getattr(tokenizer, "chat_template", None))
    if mode is True and not has:
        raise ValueError(f"prompt.chat_template=true but the tokenizer ({type(tokenizer).__name__}) has no chat "
                         f"template; set prompt.chat_template=auto or false")
    return has and mode is not False


def render_prompt(tokenizer: Any, prompt: str, mode: Any = "auto") -> str:
    """The text the policy is given for `prompt` (a `build_prompt` result): unchanged, or the prompt as the user turn
    of the tokenizer's chat template followed by the assistant's opening (`uses_chat_template`). One function for
    generation (`PolicyActor`) and training (`policy.samples.trajectory_samples`), so both encode the same ids; the
    rendered text is tokenized without added special tokens (the template writes its own)."""
    if not uses_chat_template(tokenizer, mode):
        return prompt
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)


def extract_action(text: str, stop: Sequence[str], think: bool = False) -> str:
    """The action in a model response: the <action> tag's content, else the text up to and including the
    first stop string."""
    m = _ACTION_TAG.search(text)
    if m:
        return m.group(1).strip()
    if think:
        return text.strip()
    return cut_at_stop(text, stop)[0].strip()
