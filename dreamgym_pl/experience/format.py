"""Experience-model prompt and target in a tagged text format, and a parser that never raises.

Prompt: k retrieved real transitions (demonstrations), last H steps, current state, task, action. The task
sits next to the action it judges: a purchase's outcome is the task's requirements checked against the state,
and a small model attends to what is near (measured: with the task first, the tiny model checked the page
against itself and called every purchase a success).
Target: `<reasoning> .. </reasoning> <next_state> .. </next_state> <actions> a | b </actions>
<reward> r </reward> <done> true|false </done>`. Tags are matched whitespace-insensitively, since word
tokenizers detokenise `<reasoning>` as `< reasoning >`. An output that misses the state, reward or done
tag becomes an invalid transition (failure state, reward 0, done) and is counted by the caller.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Sequence

from dreamgym_pl.core import Observation, Transition
from dreamgym_pl.rollout.prompts import history_lines

INVALID_STATE = "invalid transition: the environment could not continue"
TAGS = ("reasoning", "next_state", "actions", "reward", "done")  # the target's tags, in order
TASK_TAG = "task"  # the task generator's output tag (the same model prompted as M_task)
# a generated transition ends with its done tag; word tokenizers detokenise it spaced
STOP = ["</done>", "< / done >"]
TASK_STOP = [f"</{TASK_TAG}>", f"< / {TASK_TAG} >"]


def atomic_tags() -> list[str]:
    """The format's tags, which the tiny word tokenizer keeps as one token each (not `<`, `next`, `_`, ...)."""
    return [f"<{s}{t}>" for t in TAGS + (TASK_TAG,) for s in ("", "/")]


def vocabulary() -> list[str]:
    """The words of the experience prompt and target outside the environment's own text (the tiny
    tokenizer is trained on them: an <unk> is dropped on decode and breaks parsing)."""
    return ["example : state : action : next : reward : done : predict : true false | 0.00 1.00 ...", INVALID_STATE]


@dataclass
class ExperienceFormat:
    history: int = 2            # last H (action) steps in the prompt; 0 = none (ablation)
    history_obs_words: int = 0  # words of each past state shown
    k: int = 2                  # demonstrations shown (retrieved real transitions); 0 = no retrieval
    demo_words: int = 40        # words of demo states / next states shown
    state_words: int = 120      # words of the current state shown
    reasoning: bool = True      # target starts with a reasoning trace (False: ablation "no reasoning")
    exclude: str = "task"       # retrieval never shows a step: task (its own task's transitions) | episode | none
    overfetch: int = 4          # exclude=episode: extra neighbours retrieved so that k remain
    synthetic_demos: bool = False  # retrieval may show the buffer's synthetic transitions (enrichment); else real only
    online_k: int = 0           # of the k shown by the synthetic env, up to this many are the nearest online ones
    max_prompt_tokens: int = 768   # training prompts keep their last N tokens
    max_target_tokens: int = 256   # training targets keep their first N tokens


@dataclass
class ParsedStep:
    observation: Observation
    reward: float
    done: bool
    reasoning: str = ""
    valid: bool = True
    errors: list[str] = field(default_factory=list)


def _words(text: str, n: int) -> str:
    w = text.split()
    return " ".join(w[:n]) + (" ..." if len(w) > n else "")


def build_prompt(instruction: str, history: Sequence[tuple[str, str]], demos: Sequence[Transition], state: Observation,
                 action: str, fmt: ExperienceFormat) -> str:
    parts = []
    for d in list(demos)[: fmt.k]:
        parts.append(f"example : state : {_words(d.state.text, fmt.demo_words)} action : {d.action} "
                     f"next : {_words(d.next_state.text, fmt.demo_words)} reward : {d.reward:.2f} done : {str(d.done).lower()}")
    parts += history_lines(history, fmt.history, fmt.history_obs_words)
    parts.append(f"state : {_words(state.text, fmt.state_words)}")
    parts.append(f"task : {instruction}")
    parts.append(f"action : {action}")
    parts.append("predict :")
    return " \n".join(parts)


def build_target(next_state: Observation, reward: float, done: bool, reasoning: str, fmt: ExperienceFormat) -> str:
    parts = []
    if fmt.reasoning:
        parts.append(f"<reasoning> {reasoning} </reasoning>")
    parts.append(f"<next_state> {next_state.text} </next_state>")
    parts.append(f"<actions> {' | '.join(next_state.admissible)} </actions>")
    parts.append(f"<reward> {reward:.2f} </reward>")
    parts.append(f"<done> {str(bool(done)).lower()} </done>")
    return " ".join(parts)



def _tag(text: str, name: str) -> str | None:
    """Content of `<name> ... </name>`; a missing closing tag ends the content at the next opening tag of
    the format (or the end), since small models often drop closing tags but keep the order."""
    m = re.search(rf"<\s*{name}\s*>(.*?)<\s*/\s*{name}\s*>", text, re.DOTALL | re.IGNORECASE)
    if m:
        return m.group(1)
    m = re.search(rf"<\s*{name}\s*>", text, re.IGNORECASE)
    if not m:
        return None
    rest = text[m.end():]
    others = "|".join(t for t in TAGS if t != name)
    nxt = re.search(rf"<\s*/?\s*(?:{others})\s*>", rest, re.IGNORECASE)
    return rest[: nxt.start()] if nxt else rest


def _detok(s: str) -> str:
    """Undo word-tokenizer spacing inside brackets: `click [ b0x ]` -> `click[b0x]`."""
    s = " ".join(s.split())
    s = re.sub(r"(\w)\s*\[\s*", r"\1[", s)
    return re.sub(r"\s*\]", "]", s)


def parse_output(text: str) -> ParsedStep:
    """Parse a model output; never raises. Missing state/reward/done -> invalid failure transition."""
    errors: list[str] = []
    try:
        state = _tag(text, "next_state")
        reward_s = _tag(text, "reward")
        done_s = _tag(text, "done")
        actions_s = _tag(text, "actions")
        reasoning = (_tag(text, "reasoning") or "").strip()
        if state is None or not state.strip():
            errors.append("next_state")
        reward = 0.0
        if reward_s is None:
            errors.append("reward")
        else:
            try:
                num = re.search(r"-?\d[\d\s]*(?:\.\s*[\d\s]*\d)?", reward_s)
                reward = float(num.group(0).replace(" ", "")) if num else float(reward_s.replace(" ", ""))
                if not math.isfinite(reward):
                    raise ValueError
                reward = min(1.0, max(0.0, reward))
            except ValueError:
                errors.append("reward")
        dm = re.search(r"\b(true|false)\b", (done_s or "").lower())
        done_v = dm.group(1) if dm else ""
        if done_v not in ("true", "false"):
            errors.append("done")
        if errors:
            return ParsedStep(Observation(INVALID_STATE, []), 0.0, True, reasoning, False, errors)
        admissible = [_detok(a) for a in (actions_s or "").split("|") if a.strip()]
        return ParsedStep(Observation(" ".join(state.split()), admissible), reward, done_v == "true", reasoning, True, [])
    except Exception as e:  # the parser must never take a run down
        return ParsedStep(Observation(INVALID_STATE, []), 0.0, True, "", False, [f"exception: {e!r}"])


def target_length_report(lengths: Sequence[int], max_new_tokens: int) -> dict[str, float]:
    """How well `max_new_tokens` covers the training targets (token counts, EOS included).

    A target longer than the generation bound is cut before its `<reward>`/`<done>` tags, so the synthetic env
    can only produce an invalid transition for it: `over_share` is a floor on the invalid-output rate.
    Returns the share of targets over the bound, the longest target and the 95th-percentile length
    (nearest-rank)."""
    xs = sorted(int(n) for n in lengths)
    if not xs:
        return {"over_share": 0.0, "max_len": 0.0, "p95_len": 0.0}
    over = sum(1 for n in xs if n > max_new_tokens)
    p95 = xs[max(0, math.ceil(0.95 * len(xs)) - 1)]
    return {"over_share": over / len(xs), "max_len": float(xs[-1]), "p95_len": float(p95)}
