"""Curriculum task generation (paper Eq. 6-7): reward-variance selection and lambda-bounded mixing.

Pure functions here; the task generator (the experience model prompted as M_task) and the wiring into the
synthetic RL stage use them.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from dreamgym_pl.core import Task
from dreamgym_pl.envs.base import root_goal


def task_variance(rewards: Sequence[float]) -> float:
    """V_tau = mean((r_i - mean r)^2) (population variance): 0 if always solved or always failed, 0.25 at a
    50/50 split of binary rewards."""
    if not rewards:
        return 0.0
    m = sum(rewards) / len(rewards)
    return sum((r - m) ** 2 for r in rewards) / len(rewards)


def group_rewards(task_ids: Sequence[str], rewards: Sequence[float]) -> dict[str, list[float]]:
    """task id -> its episodes' rewards, in order."""
    groups: dict[str, list[float]] = {}
    for t, r in zip(task_ids, rewards):
        groups.setdefault(t, []).append(float(r))
    return groups


def group_variances(task_ids: Sequence[str], rewards: Sequence[float]) -> dict[str, float]:
    return {t: task_variance(rs) for t, rs in group_rewards(task_ids, rewards).items()}


def select_seeds(variances: dict[str, float], min_variance: float, num_seeds: int) -> list[str]:
    """Task ids with V >= min_variance, highest first (ties by id, for determinism), at most num_seeds."""
    ok = [(v, t) for t, v in variances.items() if v >= min_variance]
    ok.sort(key=lambda x: (-x[0], x[1]))
    return [t for _, t in ok[:num_seeds]]


def max_generated(batch_size: int, max_share: float) -> int:
    """The most generated tasks a batch of `batch_size` may hold under the bound lambda (`curriculum.lambda_`)."""
    if not 0.0 <= max_share <= 1.0:
        raise ValueError(f"curriculum.lambda_: must lie in [0, 1], got {max_share}")
    return int(math.floor(max_share * batch_size + 1e-9))


def usable(generated: Sequence[Task], uses: dict[str, int], max_uses: int) -> list[Task]:
    """The generated tasks that may still join a batch: those used in fewer than `max_uses` batches
    (`curriculum.max_uses`; 0: no limit, every one)."""
    if max_uses < 0:
        raise ValueError(f"curriculum.max_uses: must be >= 0, got {max_uses}")
    return [t for t in generated if max_uses == 0 or uses.get(t.task_id, 0) < max_uses]


def mix_batch(original: Sequence[Task], generated: Sequence[Task], batch_size: int, max_share: float,
              rng: random.Random) -> list[Task]:
    """A batch with at most floor(lambda * B) generated tasks (the newest first), the rest original tasks
    drawn without replacement so their coverage is kept. `generated`: the ones that may join (`usable`)."""
    n_gen = min(len(generated), max_generated(batch_size, max_share))
    gen = list(generated)[-n_gen:] if n_gen else []
    orig = rng.sample(list(original), min(len(original), batch_size - n_gen))
    return orig + gen


def cluster_groups(embeddings: np.ndarray, num_clusters: int, seed: int = 0, iters: int = 20) -> list[int]:
    """k-means (cosine, on normalised rows) cluster ids, used as groups for PPO which has none."""
    n = len(embeddings)
    if n == 0:
        return []
    k = max(1, min(num_clusters, n))
    rng = np.random.default_rng(seed)
    x = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    centers = x[rng.choice(n, size=k, replace=False)]
    labels = np.zeros(n, dtype=int)
    for _ in range(iters):
        labels = np.argmax(x @ centers.T, axis=1)
        new = np.stack([x[labels == c].mean(0) if np.any(labels == c) else centers[c] for c in range(k)])
        new /= np.maximum(np.linalg.norm(new, axis=1, keepdims=True), 1e-12)
        if np.allclose(new, centers):
            break
        centers = new
    return labels.tolist()


_DIGIT_GAP = re.compile(r"(?<=\d) (?=\d)")
_DECIMAL = re.compile(r"(?<=\d) \. (?=\d)")
_LEFT_PUNCT = re.compile(r" ([,.:;!?)%])")
_OPEN_PAREN = re.compile(r"\( ")
_INFIX = re.compile(r"(?<=\w) ([-/'’]) (?=\w)")
_KEY_TOKENS = re.compile(r"[^\W\d_]+|\d|\S")


def detokenize(text: str) -> str:
    """Undo the word tokenizer's spacing of decoded text (it splits single digits and punctuation off and
    joins tokens with spaces): `lower than 5 0 . 0 0 dollars` -> `lower than 50.00 dollars`,
    `flavor : vanilla , and size : 1 2 ounce` -> `flavor: vanilla, and size: 12 ounce`,
    `x - large`, `it ' s` -> `x-large`, `it's`. Real instructions come back unchanged from
    `detokenize(decode(encode(text)))` (tested on every built-in WebShop goal)."""
    s = " ".join(text.split())
    s = _DIGIT_GAP.sub("", s)
    s = _DECIMAL.sub(".", s)
    s = _LEFT_PUNCT.sub(r"\1", s)
    s = _OPEN_PAREN.sub("(", s)
    return _INFIX.sub(r"\1", s)


def text_key(text: str) -> str:
    """A spacing- and case-insensitive key of an instruction, split where the word tokenizer splits (letter
    runs, single digits, single punctuation marks): a decoded instruction and its original have one key."""
    return " ".join(_KEY_TOKENS.findall(text.lower()))


def parse_generated_task(text: str, max_words: int = 40) -> str | None:
    """The instruction in a generated `<task> ... </task>`, detokenised (`detokenize`); None if missing, empty
    or over `max_words` words."""
    return parse_task_output(text, max_words)[0]


def parse_task_output(text: str, max_words: int = 40) -> tuple[str | None, str | None]:
    """(instruction, None) for a generated `<task> ... </task>`, detokenised, or (None, why it does not parse)."""
    m = re.search(r"<\s*task\s*>(.*?)<\s*/\s*task\s*>", text, re.DOTALL | re.IGNORECASE)
    if not m:
        return None, "no <task> ... </task>"
    s = detokenize(m.group(1))
    if not s:
        return None, "empty task"
    if len(s.split()) > max_words:
        return None, f"over {max_words} words"
    return s, None


def judge_generation(text: str, seed: Task, known_keys: set[str], check: Callable[[str, Task], str | None],
                     max_words: int = 40) -> tuple[str | None, dict[str, bool], str | None]:
    """Judge one generated text for the seed it varies: (instruction or None, flags, why it is rejected or
    None). Flags: `parsed` (tag present, not empty, not over-long), `valid` (parsed and well-formed for the
    env: `check(instruction, seed)` returns no problem), `new` (parsed and no existing instruction has its
    `text_key`). Accepted means valid and new."""
    instr, why = parse_task_output(text, max_words)
    if instr is None:
        return None, {"parsed": False, "valid": False, "new": False}, why
    problem = check(instr, seed)
    new = text_key(instr) not in known_keys
    flags = {"parsed": True, "valid": problem is None, "new": new}
    if problem is not None:
        return instr, flags, problem
    if not new:
        return instr, flags, "an existing instruction"
    return instr, flags, None


FAMILY_MODES = ("none", "prompt", "slot")
FAMILY_SLOT = "<family>"  # where the seed's family stands in a slot-mode target; one token of the tiny tokenizer


def _check_mode(mode: str) -> None:
    if mode not in FAMILY_MODES:
        raise ValueError(f"curriculum.family: one of {', '.join(FAMILY_MODES)}, got {mode!r}")


def task_generation_prompt(seed_instruction: str, family: str = "", mode: str = "none") -> str:
    """The task generator's prompt (the experience model as M_task): the seed's instruction and the request
    for a variation; with `curriculum.family` prompt or slot, the prompt ends with the seed's `family`
    (`env.task_family`, what a variation keeps, e.g. WebShop's product type) and the opened `<task>` tag, so that
    the generation starts right after the family it must keep (no words outside the existing vocabulary)."""
    _check_mode(mode)
    base = (f"seed task : {seed_instruction} \nwrite a new task that is challenging but feasible , meaningfully "
            f"different and realistic : ")
    return base if mode == "none" else f"{base}{family} <task>"


def task_generation_target(instruction: str, family: str, mode: str) -> str:
    """The generator's training target for a variation `instruction` of a seed of `family`, by `curriculum.family`:
    none: the tagged instruction; prompt: without the opening tag (the prompt holds it); slot: that too, and each
    whole-word occurrence of the family written `FAMILY_SLOT`, so the generator never has to copy it."""
    _check_mode(mode)
    if mode == "none":
        return f"<task> {instruction} </task>"
    if mode == "slot" and family:
        instruction = re.sub(rf"(?<!\w){re.escape(family)}(?!\w)", FAMILY_SLOT, instruction, flags=re.IGNORECASE)
    return f" {instruction} </task>"


def generated_text(text: str, family: str, mode: str) -> str:
    """A generation read as the whole tagged task: the prompt's opening `<task>` put back (prompt, slot), and
    in slot mode each `FAMILY_SLOT` filled with the seed's family."""
    _check_mode(mode)
    if mode == "none":
        return text
    if mode == "slot":
        text = text.replace(FAMILY_SLOT, f" {family} ")
    return f"<task> {text.lstrip()}"


def accept_all(instruction: str, seed: Task) -> str | None:
    """The default validity check: every parsed instruction is well-formed."""
    return None


def variation_pairs(tasks: Sequence[Task], family: Callable[[Task], str], n: int,
                    rng: random.Random) -> list[tuple[Task, Task]]:
    """`n` (seed, variation) training pairs for the task generator: the seed drawn uniformly from the tasks
    whose family (`env.task_family`: WebShop's product type, TextWorld's kind of quest) holds another task
    with a different instruction, the variation uniformly from those. A task alone in its family is never a seed (pairing it with a task of another family would teach the generator
    to change what a variation keeps); no pairs when every family has one instruction."""
    by_family: dict[str, list[Task]] = {}
    for t in tasks:
        by_family.setdefault(family(t), []).append(t)
    seeds = [t for t in tasks if any(x.instruction != t.instruction for x in by_family[family(t)])]
    near: dict[int, list[Task]] = {}

    def choices(a: Task) -> list[Task]:
        if id(a) not in near:
            near[id(a)] = [x for x in by_family[family(a)] if x.instruction != a.instruction]
        return near[id(a)]

    out = []
    for _ in range(n if seeds else 0):
        a = rng.choice(seeds)
        out.append((a, rng.choice(choices(a))))
    return out


@dataclass
class CurriculumState:
    """Saved with checkpoints so that a resumed run continues the curriculum."""

    values: dict[str, float] = field(default_factory=dict)
    generated: list[Task] = field(default_factory=list)
    rejected: int = 0
    shares: list[float] = field(default_factory=list)
    attempts: int = 0  # generations judged so far, and how many were valid / new / both (`judge_generation`)
    valid: int = 0
    new: int = 0
    accepted: int = 0
    uses: dict[str, int] = field(default_factory=dict)  # generated task id -> batches it has joined


class Curriculum:
    """Per-iteration task sampler for synthetic RL: values tasks by their group reward variance, asks the task
    generator (the experience model as M_task) for variations of the highest-variance seeds, and mixes at
    most a share lambda of generated tasks into each batch.

    `generate(prompts) -> texts` is the generator; `task_values(trajectories) -> {task id: value}` values the
    tasks of an iteration (the RL algorithm's grouping: GRPO groups, PPO clusters); `check_task(instruction,
    seed task) -> problem or None` is the env's validity check (`env.check_generated_task`).
    """

    def __init__(self, original: Sequence[Task], generate: Callable[[list[str]], list[str]],
                 task_values: Callable[[list], dict[str, float]], max_share: float, min_variance: float,
                 num_seeds: int, batch_size: int, seed: int = 0, max_words: int = 40,
                 state: CurriculumState | None = None, held_out: Sequence[str] = (),
                 check_task: Callable[[str, Task], str | None] = accept_all, num_examples: int = 8,
                 max_uses: int = 0, family: Callable[[Task], str] | None = None,
                 family_mode: str = "none"):
        """`held_out`: instructions a generated task must never equal (the val and test tasks'); equality is
        by `text_key`, so a detokenised generation and a real instruction compare like with like.
        `num_examples`: (seed, generation, verdict) examples kept per iteration for the logs.
        `max_uses`: batches a generated task may join (0: no limit; then the newest ones join every batch).
        `family`, `family_mode`: the env's `task_family` and how the generator is given it (`curriculum.family`:
        none, prompt, slot; `task_generation_target`)."""
        max_generated(batch_size, max_share)  # validates lambda
        usable([], {}, max_uses)  # validates max_uses
        _check_mode(family_mode)
        if family_mode != "none" and family is None:
            raise ValueError(f"curriculum.family={family_mode} needs the env's task_family")
        self.family, self.family_mode = family, family_mode
        self.max_uses = max_uses
        self.original = list(original)
        self.generate = generate
        self.task_values = task_values
        self.check_task = check_task
        self.max_share, self.min_variance, self.num_seeds = max_share, min_variance, num_seeds
        self.batch_size = batch_size
        self.max_words, self.num_examples = max_words, num_examples
        self.rng = random.Random(seed)
        self.state = state or CurriculumState()
        self.known = {text_key(t.instruction) for t in self.original} | {
            text_key(t.instruction) for t in self.state.generated} | {text_key(s) for s in held_out}
        self.last_logs: dict[str, float] = {}
        self.last_new: list[Task] = []
        self.last_examples: list[tuple[str, str, str]] = []  # (seed instruction, generated text, verdict)

    def _variation(self, parent: Task, instruction: str) -> Task:
        """A generated task: played from the parent's real start (its root goal, however deep the lineage)."""
        return Task(task_id=f"gen-{len(self.state.generated)}", instruction=instruction,
                    goal={"generated": True, "parent_goal": root_goal(parent.goal)}, parent_id=parent.task_id,
                    generation=parent.generation + 1)

    def update(self, trajs) -> None:
        by_id = {t.task.task_id: t.task for t in trajs}
        values = self.task_values(trajs)
        self.state.values.update(values)
        self.last_new, self.last_examples = [], []
        seeds = select_seeds(values, self.min_variance, self.num_seeds) if self.max_share > 0 else []
        counts = {"parsed": 0, "valid": 0, "new": 0}
        asked = list(seeds)
        mode = self.family_mode
        fams = [self.family(by_id[s]) if mode != "none" else "" for s in asked]
        prompts = [task_generation_prompt(by_id[s].instruction, f, mode) for s, f in zip(asked, fams)]
        texts = [generated_text(t, f, mode) for t, f in zip(self.generate(prompts), fams)] if asked else []
        for sid, text in zip(asked, texts):
            parent = by_id[sid]
            instr, flags, why = judge_generation(text, parent, self.known, self.check_task, self.max_words)
            for k, v in flags.items():
                counts[k] += int(v)
            self.state.attempts += 1
            self.state.valid += int(flags["valid"])
            self.state.new += int(flags["new"])
            if len(self.last_examples) < self.num_examples:
                self.last_examples.append((parent.instruction, instr if instr is not None else text.strip(),
                                           "accepted" if why is None else f"rejected: {why}"))
            if why is not None:
                self.state.rejected += 1
                continue
            self.state.accepted += 1
            task = self._variation(parent, instr)
            self.known.add(text_key(instr))
            self.state.generated.append(task)
            self.last_new.append(task)
        self.last_logs = {"curriculum/mean_variance": float(np.mean(list(values.values()))) if values else 0.0,
                          "curriculum/num_generated": float(len(self.state.generated)),
                          "curriculum/rejected": float(self.state.rejected), "curriculum/seeds": float(len(seeds))}
        if texts:  # shares of this iteration's generations (none without seeds)
            n = len(texts)
            self.last_logs.update({"curriculum/parsed_share": counts["parsed"] / n,
                                   "curriculum/valid_share": counts["valid"] / n, "curriculum/new_share": counts["new"] / n,
                                   "curriculum/rejected_share": (n - len(self.last_new)) / n})

    def totals(self) -> dict[str, float]:
        """The stage's task generation so far: generations judged, and the shares of them that were valid, new
        and rejected (curriculum/generation_* for metrics.json)."""
        st, n = self.state, max(1, self.state.attempts)
        return {"curriculum/generation_attempts": float(st.attempts), "curriculum/generation_valid_share": st.valid / n,
                "curriculum/generation_new_share": st.new / n, "curriculum/generation_rejected_share": (st.attempts - st.accepted) / n,
                "curriculum/generation_accept_share": st.accepted / n}

    def sample(self, last_trajs) -> list[Task]:
        """The next batch of tasks, after learning from the last iteration's trajectories (None: none yet)."""
        if last_trajs:
            self.update(last_trajs)
        batch = mix_batch(self.original, usable(self.state.generated, self.state.uses, self.max_uses),
                          self.batch_size, self.max_share, self.rng)
        for t in batch:
            if t.parent_id is not None:
                self.state.uses[t.task_id] = self.state.uses.get(t.task_id, 0) + 1
        share = sum(1 for t in batch if t.parent_id is not None) / max(1, len(batch))
        self.state.shares.append(share)
        self.last_logs["curriculum/synthetic_share"] = share
        return batch
