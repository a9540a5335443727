"""TextWorld household games (the engine under ALFWorld; ALFWorld itself is in envs/alfworld.py).

Games come from TextWorld's own generator, one game per seed, compiled once into a cache directory keyed by
the generation options (train, val and test use disjoint seed ranges). Each task is one game: the instruction is
the game's objective, observations are the game's feedback with the ASCII banner and the status line
stripped, actions are text commands (the admissible ones are listed), the reward is sparse success (won = 1)
as in ALFWorld, or optionally the score increase normalised by the maximum score. The next walkthrough
command from the current state is kept in `Observation.refs` for the oracle agent (never shown to LLMs).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from dreamgym_pl.agents import RandomAgent
from dreamgym_pl.core import Observation, StepResult, Task, Transition
from dreamgym_pl.envs.base import SerialVecEnv, pick_split, register, root_goal, scripted_agent_by_name
from dreamgym_pl.envs.textworld_tasks import entity_problem, quest_kind

TEST_SEED_BASE = 1_000_000  # test games use seeds TEST_SEED_BASE + i: disjoint from the train seeds 1..N
VAL_SEED_BASE = 2_000_000   # val games use seeds VAL_SEED_BASE + i: disjoint from train and test
_BANNER_LINE = re.compile(r"^[\s_$|\\/<>=\-]*$")
_STATUS = re.compile(r"\n\s*>\s*(-=.*?=-\s*\d+/\d+)?\s*$", re.DOTALL)
_ROOM = re.compile(r"-=\s*(.+?)\s*=-")
_END_PROMPT = re.compile(r"\s*(You scored \d+ out of a possible \d+, in \d+ turns?\.)?\s*Would you like to RESTART.*$",
                         re.DOTALL)


class GameDataError(RuntimeError):
    """A missing, unreadable or broken game file (the message says which and what to do)."""


# ----- pure text helpers -------------------------------------------------------------------------------
def strip_banner(text: str) -> str:
    """Drop the leading ASCII-art banner (lines made only of `_ $ | \\ / < > = -` and spaces)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _BANNER_LINE.match(lines[i]):
        i += 1
    return "\n".join(lines[i:]) if any(ch in "\n".join(lines[:i]) for ch in "$|") else text


def clean_feedback(text: str, objective: str = "") -> str:
    """Game feedback as an observation: no banner, no objective repeat, no `>` prompt/status line,
    whitespace collapsed to single spaces."""
    text = _END_PROMPT.sub("", _STATUS.sub("", strip_banner(text or "")))
    if objective:
        text = text.replace(objective.strip(), " ")
    return " ".join(text.split())


def normalize_command(cmd: str) -> str:
    """Case-, spacing- and punctuation-spacing-insensitive form (`Take  TextWorld - style key` ->
    `take textworld-style key`): a detokenised model command matches its admissible original."""
    s = " ".join((cmd or "").lower().split())
    return re.sub(r"\s*([-'’:,.])\s*", r"\1", s).strip()


def match_command(action: str, admissible: Sequence[str]) -> str | None:
    key = normalize_command(action)
    for a in admissible:
        if normalize_command(a) == key:
            return a
    return None


def room_of(text: str) -> str | None:
    m = _ROOM.search(text or "")
    return m.group(1).strip().lower() if m else None


def textworld_reasoning(t: Transition) -> str:
    """Rule-based reasoning from the game's state: what the command changed and why the reward is what it is."""
    info = t.info
    if info.get("invalid"):
        return "the command is not possible here so nothing changes and the quest does not advance"
    if info.get("won"):
        return "this completes the last step of the quest so the game is won and the reward is 1.00"
    if info.get("lost"):
        return "this makes the quest impossible so the game is lost and the reward is 0.00"
    parts = []
    before, after = info.get("room_before"), info.get("room_after")
    if before and after and before != after:
        parts.append(f"the command moves the player from the {before} to the {after}")
    else:
        first = re.split(r"(?<=[.!?])\s", t.next_state.text.strip(), maxsplit=1)[0]
        parts.append(f"the command works: {first.lower()}" if first else "the command works")
    if info.get("score_delta", 0) > 0:
        parts.append(f"this completes a step of the quest so the score rises to {info.get('score')} of "
                     f"{info.get('max_score')} but the quest is not finished")
    else:
        parts.append("the quest is not finished so the reward is 0.00")
    return " ".join(parts)


# ----- generation ------------------------------------------------------------------------------------
def generation_options(nb_rooms: int, nb_objects: int, quest_length: int, theme: str = "house") -> dict[str, Any]:
    return {"nb_rooms": int(nb_rooms), "nb_objects": int(nb_objects), "quest_length": int(quest_length),
            "theme": theme}


def cache_key(opts: dict[str, Any]) -> str:
    import textworld

    raw = json.dumps({**opts, "textworld": textworld.__version__}, sort_keys=True)
    return hashlib.sha1(raw.encode()).hexdigest()[:12]


def _generate_one(args: tuple[int, dict[str, Any], str]) -> str:
    """Generate and compile the game of one seed into `out_dir/game_<seed>.z8` (+ .json); returns the path."""
    seed, opts, out_dir = args
    import textworld
    from textworld.generator import compile_game, make_game

    path = Path(out_dir) / f"game_{seed}.z8"
    if path.exists() and path.with_suffix(".json").exists():
        return str(path)
    o = textworld.GameOptions()
    o.seeds = seed
    o.nb_rooms, o.nb_objects, o.quest_length = opts["nb_rooms"], opts["nb_objects"], opts["quest_length"]
    o.grammar.theme = opts["theme"]
    tmp = Path(out_dir) / f".tmp_{seed}_{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    o.path = str(tmp / f"game_{seed}.z8")
    o.force_recompile = True
    game = make_game(o)
    compiled = Path(compile_game(game, o))
    # publish the pair atomically enough: json first, then the game file whose presence marks completion
    os.replace(compiled.with_suffix(".json"), path.with_suffix(".json"))
    os.replace(compiled, path)
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    return str(path)


def generate_games(cache_dir: str | Path, seeds: Sequence[int], opts: dict[str, Any], workers: int = 2,
                   progress: bool = True) -> list[Path]:
    """Compile the games of `seeds` once (cached); returns their paths in seed order."""
    out = Path(cache_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "options.json").write_text(json.dumps(opts, indent=1))
    todo = [s for s in seeds if not (out / f"game_{s}.z8").exists()]
    if todo:
        jobs = [(s, opts, str(out)) for s in todo]
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(jobs), desc=f"generating {len(jobs)} TextWorld games")
        if workers > 1 and len(jobs) > 1:
            with ProcessPoolExecutor(max_workers=workers) as ex:
                for _ in ex.map(_generate_one, jobs):
                    bar and bar.update(1)
        else:
            for j in jobs:
                _generate_one(j)
                bar and bar.update(1)
        bar and bar.close()
    return [out / f"game_{s}.z8" for s in seeds]


def read_game(path: Path) -> dict[str, Any]:
    """The objective and walkthrough of a compiled game (its .json); a clear error when missing or broken."""
    meta = Path(path).with_suffix(".json")
    if not Path(path).exists() or not meta.exists():
        raise GameDataError(f"TextWorld game {path} (or its .json) is missing; delete the cache directory "
                            f"{Path(path).parent} to regenerate the games")
    try:
        data = json.loads(meta.read_text())
        names = sorted({str(v.get("name")) for _, v in data.get("infos", []) if isinstance(v, dict) and v.get("name")})
        return {"objective": " ".join(data["objective"].split()),
                "walkthrough": list(data.get("metadata", {}).get("walkthrough", [])), "entities": names}
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise GameDataError(f"TextWorld game file {meta} is broken ({type(e).__name__}: {e}); delete it to "
                            f"regenerate the game") from e


def default_cache_dir() -> Path:
    return Path(os.environ.get("DREAMGYM_CACHE", Path.home() / ".cache" / "dreamgym_pl")) / "textworld"


# ----- the environment --------------------------------------------------------------------------------
def _request_infos():
    from textworld import EnvInfos

    return EnvInfos(admissible_commands=True, objective=True, policy_commands=True, won=True, lost=True,
                    score=True, max_score=True, description=True)


class TextWorldEnv:
    """One episode at a time over the game of the current task (the SingleEnv protocol)."""

    def __init__(self, max_steps: int = 20, intermediate_reward: bool = False, wrappers: Sequence[Any] = ()):
        self.max_steps = max_steps
        self.intermediate_reward = intermediate_reward
        self.wrappers = list(wrappers)
        self._env: Any = None
        self._game: str | None = None
        self.done = True

    def _load(self, game: str) -> None:
        if game == self._game and self._env is not None:
            return
        import textworld

        if self._env is not None:
            self._env.close()
        if not Path(game).exists():
            raise GameDataError(f"TextWorld game {game} is missing")
        try:
            self._env = textworld.start(game, request_infos=_request_infos(), wrappers=self.wrappers)
        except Exception as e:  # a corrupt game file fails here, named
            raise GameDataError(f"cannot load TextWorld game {game}: {type(e).__name__}: {e}") from e
        self._game = game

    def _observation(self, st: Any, text: str) -> Observation:
        adm = sorted(st.get("admissible_commands") or [])
        pol = st.get("policy_commands") or []
        refs = {"next_command": pol[0]} if pol else {}
        return Observation(text=text, admissible=adm, refs=refs)

    def reset(self, task: Task) -> Observation:
        self._load(task.goal["game"])
        st = self._env.reset()
        self.task, self.steps, self.done = task, 0, False
        self.objective = st.get("objective") or ""
        self.score = st.get("score") or 0
        self.state = st
        desc = clean_feedback(st.get("description") or "") or clean_feedback(st.feedback, self.objective)
        self.obs = self._observation(st, desc)
        return self.obs

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self.steps += 1
        cmd = match_command(action, self.obs.admissible)
        room_before = room_of(self.state.get("description") or "")
        st, _, game_over = self._env.step(cmd if cmd is not None else " ".join(action.split()) or "look")
        won, lost = bool(st.get("won")), bool(st.get("lost"))
        score, max_score = st.get("score") or 0, st.get("max_score") or 1
        delta = score - self.score
        self.score, self.state = score, st
        reward = 1.0 if won else 0.0
        if self.intermediate_reward:
            reward = max(0.0, delta) / max(1, max_score)
        done = bool(game_over or won or lost)
        info: dict[str, Any] = {"invalid": cmd is None, "success": won, "won": won, "lost": lost, "score": score,
                                "max_score": max_score, "score_delta": delta,
                                "room_before": room_before, "room_after": room_of(st.get("description") or "")}
        if not done and self.steps >= self.max_steps:
            done, info["truncated"] = True, True
        self.done = done
        self.obs = self._observation(st, clean_feedback(st.feedback, self.objective))
        return StepResult(self.obs, reward, done, info)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


class TextWorldOracle:
    """Follows the game's walkthrough from the current state (TextWorld recomputes it every step); with
    probability eps (noisy oracle) a random admissible command instead. Batched like the scripted agents."""

    def __init__(self, eps: float = 0.0, seed: int = 0, name: str = "oracle"):
        if not 0.0 <= eps <= 1.0:
            raise ValueError("agent eps must lie in [0, 1]")
        self.eps, self.rng, self.name = eps, random.Random(seed), name

    def begin(self, tasks: Sequence[Task]) -> None:
        self.tasks = list(tasks)

    def act(self, observations: Sequence[Observation | None]) -> list[str | None]:
        return [None if o is None else self.act_one(i, o) for i, o in enumerate(observations)]

    def act_one(self, slot: int, obs: Observation) -> str:
        nxt = obs.refs.get("next_command")
        if nxt is None or (self.eps > 0 and self.rng.random() < self.eps):
            return self.rng.choice(obs.admissible) if obs.admissible else "look"
        return nxt


class TextWorldVecEnv(SerialVecEnv):
    """Batched TextWorld (or ALFWorld) games as an `Environment`: the walkthrough oracle, rule-based reasoning
    and the games' vocabulary."""

    instructions = "You are playing a text adventure game."
    action_stop = ("]",)

    def __init__(self, train: list[Task], test: list[Task], max_steps: int, intermediate_reward: bool,
                 wrappers: Sequence[Any] = (), name: str = "textworld", *, val: list[Task]):
        self.splits = {"train": train, "val": val, "test": test}
        super().__init__(lambda: TextWorldEnv(max_steps, intermediate_reward, wrappers), self._tasks, max_steps)
        self.name = name
        self._all_entities: list[str] | None = None  # every game's entities, for `check_generated_task`

    def _tasks(self, split: str) -> list[Task]:
        return pick_split(self.splits, split, self.name)

    def scripted_agent(self, name: str, seed: int = 0, eps: float = 0.3) -> Any:
        """The walkthrough oracle (noisy: a random admissible command with probability eps) or the generic
        random agent."""
        return scripted_agent_by_name(name, seed, eps, TextWorldOracle, RandomAgent)

    def explain(self, t: Transition) -> str:
        return textworld_reasoning(t)

    def task_family(self, task: Task) -> str:
        """The kind of quest (`quest_kind`: the verb of the winning command), else the goal's category (ALFWorld:
        its task type, e.g. pick_and_place_simple)."""
        g = root_goal(task.goal)
        return quest_kind(g.get("walkthrough") or []) or str(g.get("category", ""))

    def check_generated_task(self, instruction: str, seed: Task) -> str | None:
        """A variation is played in its seed's game: it must name an entity of that game and none that only
        other games hold (`entity_problem`); games without an entity list (ALFWorld) accept every text."""
        own = root_goal(seed.goal).get("entities") or []
        if own and self._all_entities is None:
            self._all_entities = sorted({e for split in self.splits.values() for t in split
                                         for e in t.goal.get("entities", [])})
        return entity_problem(instruction, own, self._all_entities or [])

    def corpus(self) -> list[str]:
        """Vocabulary for the tiny word tokenizer: the reasoning templates, and the entity names and room
        descriptions' words of every game (a pretrained LLM knows these words; a word-level tokenizer built
        from train episodes only would map unseen objects of test games to <unk>)."""
        words = [" ".join(t.goal.get("entities", [])) for split in self.splits.values() for t in split]
        words += ["take from put on in into insert open close lock unlock with eat drop examine go north south "
                  "east west look inventory"]
        return words + ["the command is not possible here so nothing changes and the quest does not advance",
                "this completes the last step of the quest so the game is won and the reward is 1.00",
                "the command moves the player from the to the works: score rises of but not finished 0.00"]


def _tasks_for(paths: Sequence[Path], split: str, seeds: Sequence[int]) -> list[Task]:
    tasks = []
    for p, s in zip(paths, seeds):
        g = read_game(p)
        tasks.append(Task(task_id=f"tw-{split}-{s}", instruction=g["objective"],
                          goal={"game": str(p), "seed": s, "split": split, "category": "textworld",
                                "walkthrough": g["walkthrough"], "entities": g["entities"]}))
    return tasks


@register("textworld")
def make_textworld(num_train: int = 60, num_test: int = 30, nb_rooms: int = 3, nb_objects: int = 6,
                   quest_length: int = 3, theme: str = "house", max_steps: int = 20,
                   intermediate_reward: bool = False, cache_dir: str | None = None, workers: int = 2,
                   progress: bool = True, num_val: int = 10) -> TextWorldVecEnv:
    try:
        import textworld  # noqa: F401
    except ImportError as e:
        raise GameDataError("env=textworld needs the `textworld` package: pip install -e .[textworld]") from e
    for k, v in (("num_train", num_train), ("num_test", num_test), ("num_val", num_val), ("nb_rooms", nb_rooms),
                 ("quest_length", quest_length), ("max_steps", max_steps)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"env.{k}: must be an integer >= 1, got {v!r}")
    opts = generation_options(nb_rooms, nb_objects, quest_length, theme)
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    d = root / cache_key(opts)
    train_seeds = list(range(1, num_train + 1))
    test_seeds = [TEST_SEED_BASE + i for i in range(num_test)]
    val_seeds = [VAL_SEED_BASE + i for i in range(num_val)]
    paths = generate_games(d, train_seeds + test_seeds + val_seeds, opts, workers, progress)
    train = _tasks_for(paths[:num_train], "train", train_seeds)
    test = _tasks_for(paths[num_train:num_train + num_test], "test", test_seeds)
    val = _tasks_for(paths[num_train + num_test:], "val", val_seeds)
    return TextWorldVecEnv(train, test, max_steps, intermediate_reward, val=val)
