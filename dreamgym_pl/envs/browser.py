"""Web browser environments through BrowserGym: MiniWoB++ (pages shipped in the `miniwob` package) and
WebArena(-Lite) where its servers run.

The observation is the page's accessibility tree reduced to its elements with BrowserGym ids and its text
(the abstract textual state of the paper), preceded by the task's utterance; the actions are BrowserGym's
high-level actions (`click('13')`, `fill('12', 'text')`, ...); reward and done come from the task. Each batch
slot owns one headless browser, reused across episodes of the same task and closed on exit and on errors.

Browser set-up is done here, not by hand: `ensure_browser()` points playwright at the system chromium (the
playwright build BrowserGym pins expects its own download, impossible offline) by creating the folder
playwright looks for with a link to the system binary, and points MiniWoB at the `miniwob` package's pages.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Sequence

from dreamgym_pl.core import Observation, StepResult, Task, Transition
from dreamgym_pl.envs.base import pick_split, register, root_goal, scripted_agent_by_name
from dreamgym_pl.envs.miniwob_agents import _LINE, FILLABLE, MiniWoBOracle, RandomBrowserAgent, elements
from dreamgym_pl.envs.parallel import ProcessVecEnv

# MiniWoB++ tasks whose goal can be read from the utterance and the accessibility tree (scripted oracles in
# envs/miniwob_agents.py)
MINIWOB_TASKS = ("click-button", "click-button-sequence", "click-checkboxes", "click-dialog", "click-option",
                 "click-tab", "enter-password", "enter-text", "focus-text", "login-user")
TEST_SEED_BASE = 100_000  # MiniWoB test goals: seeds TEST_SEED_BASE.. (train: 0..train_seeds-1)
VAL_SEED_BASE = 200_000   # MiniWoB val goals: seeds VAL_SEED_BASE.. (disjoint from train and test)
CLICKABLE = {"button", "link", "checkbox", "radio", "tab", "menuitem", "option", "treeitem", "switch"}
_ATTR_DROP = re.compile(r",?\s*(url|describedby|controls|live|relevant|orientation|multiselectable|atomic|modal)"
                        r"(='[^']*'|=\w+)?")


class BrowserSetupError(RuntimeError):
    """No usable browser / BrowserGym install; the message says what to install."""


# ----- set-up -------------------------------------------------------------------------------------------
def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    return None


def ensure_browser(cache: str | Path | None = None) -> dict[str, str]:
    """Make BrowserGym's playwright use the system chromium and MiniWoB use the packaged pages; returns the
    environment variables set. Idempotent."""
    try:
        import playwright
    except ImportError as e:
        raise BrowserSetupError("env=miniwob needs BrowserGym: pip install -e .[browser]") from e
    exe = os.environ.get("DREAMGYM_CHROMIUM") or find_chromium()
    if not exe:
        raise BrowserSetupError("no chromium found: install it (Debian/Ubuntu: `apt-get install -y chromium`, "
                                "which `make browser` does) or set DREAMGYM_CHROMIUM=/path/to/chrome")
    root = Path(cache or Path(os.environ.get("DREAMGYM_CACHE", Path.home() / ".cache" / "dreamgym_pl")) / "playwright")
    browsers = json.loads((Path(playwright.__file__).parent / "driver" / "package" / "browsers.json").read_text())
    rev = next(b["revision"] for b in browsers["browsers"] if b["name"] == "chromium")
    d = root / f"chromium-{rev}" / "chrome-linux"
    d.mkdir(parents=True, exist_ok=True)
    link = d / "chrome"
    if link.is_symlink() and os.readlink(link) != exe:
        link.unlink()
    if not link.exists():
        link.symlink_to(exe)
    (d.parent / "INSTALLATION_COMPLETE").touch()
    env = {"PLAYWRIGHT_BROWSERS_PATH": str(root)}
    if "MINIWOB_URL" not in os.environ:
        try:
            import miniwob
        except ImportError as e:
            raise BrowserSetupError("env=miniwob needs the `miniwob` package (its pages): pip install -e .[browser]") from e
        env["MINIWOB_URL"] = Path(miniwob.__file__).parent.joinpath("html", "miniwob").as_uri() + "/"
    os.environ.update(env)
    return env


# ----- pure helpers: the reduced tree, admissible actions, action parsing ----------------------------
def reduce_tree(flat: str) -> str:
    """BrowserGym's flattened AXTree -> one line per element with an id or non-empty text: no InlineTextBox
    nodes (Chromium >= 156 adds them), no URLs or ARIA plumbing attributes, no indentation."""
    out = []
    for raw in flat.split("\n"):
        line = raw.strip()
        if not line or line.startswith("InlineTextBox") or line.startswith("RootWebArea"):
            continue
        if line.startswith("StaticText"):
            m = re.match(r"StaticText\s+'(.*)'$", line)
            if m and m.group(1).strip():
                out.append(m.group(1).strip())
            continue
        if not line.startswith("["):
            continue
        line = _ATTR_DROP.sub("", line)
        m = _LINE.match(line)
        if m and m.group(2) in ("paragraph", "LabelText", "generic", "list", "listitem", "tablist", "group",
                                "dialog", "status") and not (m.group(3) or "").strip():
            continue  # structural containers without a name add nothing a policy can act on
        out.append(re.sub(r"\s+", " ", line))
    return "\n".join(out)


def admissible_actions(tree: str) -> list[str]:
    acts = []
    for bid, role, _ in elements(tree):
        if role in CLICKABLE:
            acts.append(f"click('{bid}')")
        elif role in FILLABLE:
            acts += [f"click('{bid}')", f"fill('{bid}', TEXT)"]
    return acts


def detokenize_text(text: str) -> str:
    """Undo a word tokenizer's spacing inside free text: digit runs (split one digit a token) are joined,
    no space before closing punctuation or after an opening bracket, none around hyphens."""
    t = re.sub(r"(?<=\d) (?=\d)", "", " ".join(text.split()))
    t = re.sub(r" ([,.!?;:)\]}])", r"\1", t)
    t = re.sub(r"([(\[{]) ", r"\1", t)
    return re.sub(r" ?- ?", "-", t)


def normalize_action(action: str) -> str:
    """Undo word-tokenizer spacing: `click ( ' 1 3 ' )` -> `click('13')`, `fill ( ' 1 2 ' , ' keli ' )` ->
    `fill('12', 'keli')`. The first argument is an element id (no spaces in BrowserGym bids); the others
    are free text."""
    a = " ".join((action or "").split())
    m = re.match(r"^(\w+)\s*\((.*)\)\s*$", a)
    if not m:
        return a
    args = [x.strip().strip("'\"").strip() for x in re.findall(r"'[^']*'|\"[^\"]*\"|[^,\s][^,]*", m.group(2))]
    args = [x for x in args if x != ""]
    args = ["".join(x.split()) if i == 0 else detokenize_text(x) for i, x in enumerate(args)]
    return f"{m.group(1)}(" + ", ".join(f"'{x}'" for x in args) + ")"


# ----- the environment -------------------------------------------------------------------------------
_OPEN: list[Any] = []


@atexit.register
def _close_all() -> None:
    for env in list(_OPEN):
        try:
            env.close()
        except Exception:
            pass
    _OPEN.clear()


def registering_module(prefix: str) -> str:
    """The module whose import registers a task family's gym ids: "browsergym/webarena." -> browsergym.webarena."""
    family = prefix.split("/", 1)[-1].split(".", 1)[0]
    if family not in ("miniwob", "webarena"):
        raise ValueError(f"no BrowserGym task family for gym id prefix {prefix!r} (miniwob, webarena)")
    return f"browsergym.{family}"


class BrowserGymEnv:
    """One browser; episodes of BrowserGym tasks (the SingleEnv protocol)."""

    def __init__(self, max_steps: int = 8, timeout_ms: int = 10000, prefix: str = "browsergym/miniwob."):
        self.max_steps, self.timeout_ms, self.prefix = max_steps, timeout_ms, prefix
        self._env: Any = None
        self._task_name: str | None = None
        self.done = True

    def _open(self, name: str) -> None:
        if self._env is not None and name == self._task_name:
            return
        self.close()
        import importlib

        import gymnasium as gym

        importlib.import_module(registering_module(self.prefix))  # registers the tasks in this worker process
        self._env = gym.make(self.prefix + name, headless=True, pre_observation_delay=0.0, slow_mo=0,
                             timeout=self.timeout_ms)
        self._task_name = name
        _OPEN.append(self._env)

    def _observation(self, obs: dict) -> Observation:
        from browsergym.utils.obs import flatten_axtree_to_str

        tree = reduce_tree(flatten_axtree_to_str(obs["axtree_object"]))
        goal = " ".join(str(obs.get("goal", "")).split())
        return Observation(text=f"goal : {goal}\n{tree}", admissible=admissible_actions(tree), refs={"goal": goal})

    def reset(self, task: Task) -> Observation:
        try:
            self._open(task.goal["task"])
            obs, _ = self._env.reset(seed=int(task.goal["seed"]))
        except Exception:
            self.close()  # a hung or crashed browser is not reused
            raise
        self.steps, self.done = 0, False
        self.obs = self._observation(obs)
        return self.obs

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self.steps += 1
        a = normalize_action(action)
        try:
            obs, reward, terminated, truncated, _ = self._env.step(a)
            error = str(obs.get("last_action_error") or "")
        except Exception as e:  # the page hung or the browser died: end the episode, counted
            self.close()
            self.done = True
            return StepResult(self.obs, 0.0, True, {"invalid": True, "success": False, "error": f"{type(e).__name__}: {e}"})
        success = float(reward) > 0
        done = bool(terminated or truncated)
        info: dict[str, Any] = {"invalid": bool(error), "success": success, "score": float(reward)}
        if error:
            info["error"] = error[:200]
        if not done and self.steps >= self.max_steps:
            done, info["truncated"] = True, True
        self.done = done
        self.obs = self._observation(obs) if not done or not success else Observation("goal : done", [], {})
        return StepResult(self.obs, 1.0 if success else 0.0, done, info)

    def close(self) -> None:
        if self._env is not None:
            try:
                self._env.close()
            finally:
                if self._env in _OPEN:
                    _OPEN.remove(self._env)
                self._env, self._task_name = None, None


def browser_reasoning(t: Transition) -> str:
    info = t.info
    if info.get("error"):
        return f"the action fails ({info['error'][:60].lower()}) so the page does not change"
    if info.get("success"):
        return "this completes the task so the episode ends with reward 1.00"
    if t.done:
        return "the episode ends without completing the task so the reward is 0.00"
    a = normalize_action(t.action)
    if a.startswith("fill("):
        return "the text is typed into the field; the task is not submitted yet so the reward is 0.00"
    return "the element is clicked and the page updates; the task is not complete yet so the reward is 0.00"


class BrowserVecEnv(ProcessVecEnv):
    """Browser slots spread over `workers` processes (each a headless chromium per slot it serves), as an
    `Environment`: the scripted MiniWoB oracles, rule-based reasoning and the action vocabulary."""

    instructions = "You are a web agent operating a browser."
    action_stop = ("]",)

    def __init__(self, train: list[Task], test: list[Task], max_steps: int, timeout_ms: int, prefix: str,
                 workers: int = 2, slots_per_worker: int = 2, *, val: list[Task]):
        self.splits = {"train": train, "val": val, "test": test}
        self.max_batch = max(1, workers * slots_per_worker)  # concurrent episodes (one browser each)
        super().__init__(functools.partial(BrowserGymEnv, max_steps, timeout_ms, prefix), self._tasks, max_steps,
                         workers=workers, timeout_s=max(30.0, 4 * timeout_ms / 1000))

    def _tasks(self, split: str) -> list[Task]:
        return pick_split(self.splits, split, "miniwob")

    def scripted_agent(self, name: str, seed: int = 0, eps: float = 0.3) -> Any:
        return scripted_agent_by_name(name, seed, eps, MiniWoBOracle, RandomBrowserAgent)

    def explain(self, t: Transition) -> str:
        return browser_reasoning(t)

    def task_family(self, task: Task) -> str:
        """WebArena: the task's intent template (`template-<id>`); MiniWoB: the task (its category), whose seeds
        are its variations."""
        g = root_goal(task.goal)
        return f"template-{g['template']}" if g.get("template") is not None else str(g.get("category", ""))

    def corpus(self) -> list[str]:
        return ["goal : click('0') fill('0', 'x') noop() TEXT", browser_reasoning.__doc__ or "",
                "the action fails so the page does not change this completes the task so the episode ends with "
                "reward 1.00 without completing the text is typed into the field; submitted yet element is "
                "clicked and page updates; complete 0.00"]


def miniwob_tasks(names: Sequence[str], seeds: Sequence[int], split: str) -> list[Task]:
    return [Task(task_id=f"miniwob-{split}-{n}-{s}", instruction=f"miniwob {n.replace('-', ' ')}",
                 goal={"task": n, "seed": s, "split": split, "category": n}) for s in seeds for n in names]


@register("miniwob")
def make_miniwob(tasks: Sequence[str] | None = None, train_seeds: int = 20, test_seeds: int = 5, max_steps: int = 8,
                 timeout_ms: int = 10000, workers: int = 2, slots_per_worker: int = 2,
                 val_seeds: int = 5) -> BrowserVecEnv:
    names = list(tasks or MINIWOB_TASKS)
    unknown = [n for n in names if n not in MINIWOB_TASKS]
    if unknown:
        raise ValueError(f"env.tasks: no scripted oracle for {unknown}; supported: {list(MINIWOB_TASKS)}")
    ensure_browser()
    train, test, val = miniwob_splits(names, train_seeds, test_seeds, val_seeds)
    return BrowserVecEnv(train, test, max_steps, timeout_ms, "browsergym/miniwob.", workers, slots_per_worker, val=val)


def miniwob_splits(names: Sequence[str], train_seeds: int, test_seeds: int,
                   val_seeds: int) -> tuple[list[Task], list[Task], list[Task]]:
    """(train, test, val): every task at seeds 0.., TEST_SEED_BASE.. and VAL_SEED_BASE.. (disjoint ranges)."""
    gap = VAL_SEED_BASE - TEST_SEED_BASE
    for k, v, hi in (("train_seeds", train_seeds, TEST_SEED_BASE), ("test_seeds", test_seeds, gap), ("val_seeds", val_seeds, gap)):
        if not isinstance(v, int) or not 0 < v <= hi:
            raise ValueError(f"env.{k}: must be an integer in 1..{hi}, got {v!r}")
    return (miniwob_tasks(names, range(train_seeds), "train"),
            miniwob_tasks(names, range(TEST_SEED_BASE, TEST_SEED_BASE + test_seeds), "test"),
            miniwob_tasks(names, range(VAL_SEED_BASE, VAL_SEED_BASE + val_seeds), "val"))


WA_VARS = ("WA_SHOPPING", "WA_SHOPPING_ADMIN", "WA_REDDIT", "WA_GITLAB", "WA_WIKIPEDIA", "WA_MAP", "WA_HOMEPAGE")


@register("webarena")
def make_webarena(split_file: str | None = None, max_steps: int = 30, timeout_ms: int = 30000, workers: int = 2,
                  slots_per_worker: int = 1, **_: Any) -> BrowserVecEnv:
    """WebArena through browsergym-webarena, with the WebArena-Lite split (a JSON file {"train": [ids],
    "test": [ids]}: 647 train / 165 test task ids; an optional "val" list is the val split, else val = the
    last tenth of the train ids in file order, removed from train) and the seven WA_* site URLs of a running
    WebArena."""
    missing = [v for v in WA_VARS if not os.environ.get(v)]
    if missing:
        raise BrowserSetupError(f"env=webarena needs a running WebArena (its Docker sites) and the URLs in "
                                f"{', '.join(WA_VARS)}; missing: {', '.join(missing)}. See "
                                f"https://github.com/web-arena-x/webarena for the servers.")
    try:
        import browsergym.webarena  # noqa: F401
    except ImportError as e:
        raise BrowserSetupError("env=webarena needs `pip install browsergym-webarena` and NLTK's punkt_tab data") from e
    if not split_file or not Path(split_file).exists():
        raise BrowserSetupError("env.split_file: a JSON file with the WebArena-Lite task ids "
                                "({\"train\": [...647 ids], \"test\": [...165 ids]}) is required")
    ensure_browser()
    split = json.loads(Path(split_file).read_text())
    import importlib.resources

    import webarena  # browsergym-webarena's dependency: the task configs

    configs = importlib.resources.files(webarena).joinpath("test.raw.json").read_text()
    intents, templates = webarena_intents(configs), webarena_templates(configs)
    mk = lambda ids, sp: webarena_tasks(ids, sp, intents, templates)  # noqa: E731
    train, val = webarena_train_val(split)
    return BrowserVecEnv(mk(train, "train"), mk(split["test"], "test"), max_steps, timeout_ms,
                         "browsergym/webarena.", workers, slots_per_worker, val=mk(val, "val"))


def webarena_intents(configs_json: str) -> dict[str, str]:
    """task id -> the task's own intent (its instruction), from WebArena's task configs (test.raw.json)."""
    return {str(c["task_id"]): " ".join(str(c["intent"]).split()) for c in json.loads(configs_json)}


def webarena_templates(configs_json: str) -> dict[str, str]:
    """task id -> its intent template id (WebArena's tasks are instances of 241 templates), from the task
    configs; tasks without one are left out."""
    return {str(c["task_id"]): str(c["intent_template_id"]) for c in json.loads(configs_json)
            if c.get("intent_template_id") is not None}


def webarena_tasks(ids: Sequence, split: str, intents: dict[str, str],
                   templates: dict[str, str] | None = None) -> list[Task]:
    """Tasks of the given ids, their instruction the intent; `template` in the goal where `templates` knows it
    (the task's family: instances of one template are variations of one another)."""
    missing = [i for i in ids if str(i) not in intents]
    if missing:
        raise ValueError(f"env.split_file: task ids {missing[:5]} are not WebArena tasks (no config with that task_id)")
    templates = templates or {}
    return [Task(task_id=f"webarena-{split}-{i}", instruction=intents[str(i)],
                 goal={"task": str(i), "seed": 0, "split": split, "category": "webarena",
                       **({"template": templates[str(i)]} if str(i) in templates else {})}) for i in ids]


def webarena_train_val(split: dict[str, list]) -> tuple[list, list]:
    """(train ids, val ids): the split file's "val" list when it has one (it must not share an id with train
    or test), else the last tenth of its train ids."""
    if not split.get("val"):
        n = max(1, len(split["train"]) // 10)
        return split["train"][:-n], split["train"][-n:]
    shared = set(map(str, split["val"])) & set(map(str, split["train"] + split["test"]))
    if shared:
        raise ValueError(f"env.split_file: val ids {sorted(shared)[:5]} are also train or test ids")
    return split["train"], split["val"]
