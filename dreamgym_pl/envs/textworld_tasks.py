"""TextWorld task variations: a quest's kind (the task generator's training pairs share it) and whether a
generated quest text is grounded in its game (`TextWorldVecEnv.check_generated_task`). Pure functions."""

from __future__ import annotations

import re
from typing import Sequence


def quest_kind(walkthrough: Sequence[str]) -> str | None:
    """The kind of a quest: the verb of its last walkthrough command, the step that wins it (`put`, `insert`,
    `eat`, `unlock`, ...); None without a walkthrough."""
    steps = [c.split()[0].lower() for c in walkthrough if c.split()]
    return steps[-1] if steps else None


def _mentions(text: str, phrase: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])", text) is not None


def entity_problem(instruction: str, own: Sequence[str], others: Sequence[str]) -> str | None:
    """Why a generated quest text is not grounded in its game (whose entities, objects and rooms, are `own`;
    `others` are the entities of the other games): it names none of its game's entities, or names one its
    game lacks. None when grounded, or when the game lists no entities (nothing to check against)."""
    text = " ".join(instruction.lower().split())
    own_l = sorted({e.lower() for e in own}, key=len, reverse=True)
    if not own_l:
        return None
    named = [e for e in own_l if _mentions(text, e)]
    if not named:
        return "names no object or room of its game"
    for e in named:  # longest first: `type x box` is taken out before `box` is looked for
        text = re.sub(r"(?<![\w-])" + re.escape(e) + r"(?![\w-])", " ", text)
    foreign = sorted({e.lower() for e in others} - set(own_l), key=len, reverse=True)
    for e in foreign:
        if _mentions(text, e):
            return f"names {e!r}, which its game lacks"
    return None
