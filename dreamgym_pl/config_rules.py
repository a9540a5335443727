"""The vocabulary of config rules: `Rule` (which values a key allows, in the error's words, and one value it
rejects, for the tests) and the constructors and ready-made rules the table in `config_keys.py` is written in."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Rule:
    ok: Callable[[Any], bool]
    allowed: str          # what the error says the key allows
    bad: Any              # a value the rule rejects (used by the test)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def integer(lo: int | None = None) -> Rule:
    if lo is None:
        return Rule(is_int, "an integer", 1.5)
    return Rule(lambda v: is_int(v) and v >= lo, f"an integer >= {lo}", lo - 1)


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False) -> Rule:
    def ok(v: Any) -> bool:
        if not _num(v):
            return False
        if lo is not None and (v <= lo if lo_open else v < lo):
            return False
        return not (hi is not None and (v >= hi if hi_open else v > hi))

    if hi is None:
        words, bad = f"a number {'>' if lo_open else '>='} {lo}", (lo if lo_open else lo - 1)
    else:
        words = f"a number in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
        bad = hi if hi_open else hi + 1
    return Rule(ok, words, bad)


def one_of(*values: Any) -> Rule:
    return Rule(lambda v: v in values, f"one of {list(values)}", "no-such-value")


def nullable(rule: Rule) -> Rule:
    return Rule(lambda v: v is None or rule.ok(v), f"null or {rule.allowed}", rule.bad)


def _existing_file(v: Any) -> bool:
    return isinstance(v, str) and Path(v).is_file()


BOOL = Rule(lambda v: isinstance(v, bool), "true or false", "maybe")
TEXT = Rule(lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string", "")
FILE = Rule(lambda v: v is None or _existing_file(v), "null or an existing file", "/no/such/file.json")
POS_INT, NONNEG_INT = integer(1), integer(0)
POS, NONNEG = number(0, lo_open=True), number(0)
PROB = number(0, 1)


def is_str_list(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(x, str) and x for x in v)


def is_stage_list(v: Any) -> bool:
    from dreamgym_pl.stages import STAGES

    return isinstance(v, (list, tuple)) and len(v) > 0 and all(s in STAGES for s in v)


def stage_words() -> str:
    from dreamgym_pl.stages import STAGES

    return f"a non-empty list of stages from {list(STAGES)}"


def is_env_name(v: Any) -> bool:
    from dreamgym_pl.envs.base import known_envs

    return v in known_envs()


def is_devices(v: Any) -> bool:
    if isinstance(v, (list, tuple)):
        return all(is_int(x) for x in v)
    return (is_int(v) and (v > 0 or v == -1)) or v == "auto"


def is_strategy(v: Any) -> bool:
    return (isinstance(v, str) and v != "") or (isinstance(v, dict) and isinstance(v.get("_target_"), str))


class Lazy(Rule):
    """A rule whose allowed words are computed when an error is raised (registries load lazily)."""

    def __init__(self, ok: Callable[[Any], bool], words: Callable[[], str], bad: Any):
        object.__setattr__(self, "ok", ok)
        object.__setattr__(self, "_words", words)
        object.__setattr__(self, "bad", bad)

    @property
    def allowed(self) -> str:  # type: ignore[override]
        return self._words()


DTYPES = ("float32", "bfloat16", "float16")
PRECISIONS = ("32-true", "32", 32, "16-mixed", "16", 16, "bf16-mixed", "bf16", "bf16-true", "16-true",
              "64-true", "64", 64, "auto")  # auto: dreamgym_pl/precision.py resolve()
