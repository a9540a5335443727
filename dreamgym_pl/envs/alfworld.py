"""ALFWorld's games through the TextWorld adapter (envs/textworld.py), where its package and data exist.

ALFWorld's PDDL games are played by the same `TextWorldVecEnv` with alfworld's own TextWorld wrappers; the
data must be downloaded by the user (`alfworld-download`), and without it making the env says so and stops.

Splits: train = `train_split` (ALFWorld's train), test = `test_split` (valid_unseen, as the paper reports),
val = ALFWorld's valid_seen, unless valid_seen is already the train or test split: then val = the last tenth
of the train games (sorted by path, so fixed) and train keeps the rest.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dreamgym_pl.core import Task
from dreamgym_pl.envs.base import register, val_tail
from dreamgym_pl.envs.textworld import GameDataError, TextWorldVecEnv

ALFWORLD_HELP = ("env=alfworld needs the `alfworld` package and its game data: `pip install alfworld`, then "
                 "`export ALFWORLD_DATA=<dir>` and `alfworld-download` (the data is downloaded from the "
                 "internet; this project cannot ship or fake it). Without it, use env=textworld.")
ALFWORLD_SPLITS = {"train": "train", "valid_seen": "valid_seen", "valid_unseen": "valid_unseen"}


def alfworld_games(data_dir: Path, split: str) -> list[Path]:
    """ALFWorld's solvable games of a split: json_2.1.1/<split>/**/game.tw-pddl."""
    root = data_dir / "json_2.1.1" / ALFWORLD_SPLITS[split]
    return sorted(root.glob("**/game.tw-pddl"))


@register("alfworld")
def make_alfworld(train_split: str = "train", test_split: str = "valid_unseen", num_train: int | None = None,
                  num_test: int | None = None, max_steps: int = 50, data_dir: str | None = None,
                  num_val: int | None = None, **_: Any) -> TextWorldVecEnv:
    """ALFWorld's games through the same adapter (its PDDL games need alfworld's own TextWorld wrappers)."""
    data = Path(data_dir or os.environ.get("ALFWORLD_DATA", ""))
    try:
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    except ImportError as e:
        raise GameDataError(ALFWORLD_HELP) from e
    if not str(data) or not (data / "json_2.1.1").is_dir():
        raise GameDataError(f"ALFWorld data not found at {str(data) or '$ALFWORLD_DATA (unset)'}. " + ALFWORLD_HELP)
    splits = {}
    val_from_train = "valid_seen" in (train_split, test_split)
    for name, split, n in (("train", train_split, num_train), ("test", test_split, num_test),
                           ("val", "valid_seen", num_val)):
        if name == "val" and val_from_train:
            continue
        if split not in ALFWORLD_SPLITS:
            raise ValueError(f"env.{name}_split: one of {sorted(ALFWORLD_SPLITS)}, got {split!r}")
        games = alfworld_games(data, split)[:n] if n else alfworld_games(data, split)
        if not games:
            raise GameDataError(f"no ALFWorld games under {data / 'json_2.1.1' / split}. " + ALFWORLD_HELP)
        tasks = []
        for g in games:
            traj = json.loads((g.parent / "traj_data.json").read_text()) if (g.parent / "traj_data.json").exists() else {}
            goal = traj.get("turk_annotations", {}).get("anns", [{}])[0].get("task_desc", "") or g.parent.parent.name
            tasks.append(Task(task_id=f"alfworld-{split}-{g.parent.parent.name}-{g.parent.name}",
                              instruction=" ".join(goal.split()),
                              goal={"game": str(g), "split": split, "category": g.parent.parent.name.split("-")[0]}))
        splits[name] = tasks
    if val_from_train:
        splits["train"], splits["val"] = val_tail(splits["train"], num_val)
    return TextWorldVecEnv(splits["train"], splits["test"], max_steps, False, [AlfredDemangler(), AlfredInfos],
                           name="alfworld", val=splits["val"])
