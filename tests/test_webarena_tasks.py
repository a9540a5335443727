"""WebArena in the browser worker: the worker imports the module that registers the task family it opens, and
each task's instruction is its own intent from WebArena's task configs (no servers needed for these checks)."""

import json

import pytest

from dreamgym_pl.envs.browser import (BrowserVecEnv, miniwob_tasks, registering_module, webarena_intents,
                                     webarena_tasks, webarena_templates)

CONFIGS = json.dumps([  # the shape of webarena's test.raw.json (only the keys read here)
    {"task_id": 0, "intent": "What is the top-1 best selling product in 2022", "sites": ["shopping_admin"],
     "intent_template_id": 279},
    {"task_id": 27, "intent": "Tell me the count of comments that have received more downvotes than upvotes\n"
                              "for the user who made the latest post on the Showerthoughts forum.", "sites": ["reddit"]},
])


def test_worker_registers_the_family_it_opens():
    import importlib

    import gymnasium as gym

    assert registering_module("browsergym/webarena.") == "browsergym.webarena"
    assert registering_module("browsergym/miniwob.") == "browsergym.miniwob"
    with pytest.raises(ValueError, match="no BrowserGym task family"):
        registering_module("browsergym/workarena.")
    importlib.import_module(registering_module("browsergym/miniwob."))
    assert "browsergym/miniwob.click-test" in gym.envs.registry


def test_webarena_instructions_are_the_tasks_intents():
    intents = webarena_intents(CONFIGS)
    tasks = webarena_tasks([27, 0], "train", intents)
    assert [t.instruction for t in tasks] == [
        "Tell me the count of comments that have received more downvotes than upvotes for the user who made the "
        "latest post on the Showerthoughts forum.", "What is the top-1 best selling product in 2022"]
    assert tasks[0].task_id == "webarena-train-27" and tasks[0].goal["task"] == "27"
    with pytest.raises(ValueError, match=r"task ids \[999\] are not WebArena tasks"):
        webarena_tasks([0, 999], "test", intents)


def test_webarena_families_are_intent_templates():
    """Instances of one intent template are variations of one another (the task generator's training pairs);
    a task without a template falls back to the category, a MiniWoB task's family is its task."""
    templates = webarena_templates(CONFIGS)
    assert templates == {"0": "279"}
    tasks = webarena_tasks([0, 27], "train", webarena_intents(CONFIGS), templates)
    assert tasks[0].goal["template"] == "279" and "template" not in tasks[1].goal
    env = BrowserVecEnv.__new__(BrowserVecEnv)  # task_family reads the task only: no browser needed
    assert [env.task_family(t) for t in tasks] == ["template-279", "webarena"]
    assert env.task_family(miniwob_tasks(["click-button"], [3], "train")[0]) == "click-button"
