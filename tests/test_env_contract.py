"""A new environment is one module plus its config: a toy environment defined here alone runs the whole
DreamGym pipeline (collect -> sft -> experience -> synthetic_rl -> eval) through the normal entry point."""

import random

import pytest
from omegaconf import OmegaConf

from dreamgym_pl.core import Observation, StepResult, Task
from dreamgym_pl.envs.base import (Environment, SerialVecEnv, make_vec_env, pick_split, register,
                                   scripted_agent_by_name, val_tail)
from dreamgym_pl.pipeline import run_pipeline
from tests.conftest import compose

ACTIONS = ["go[up]", "go[done]"]
WORDS = ["zero", "one", "two", "three"]


class Counter:
    """Count up to the task's target, then say done: reward 1 iff the counter equals the target."""

    def __init__(self, max_steps):
        self.max_steps = max_steps

    def reset(self, task):
        self.target, self.k, self.steps = task.goal["target"], 0, 0
        return Observation("counter at zero", list(ACTIONS))

    def step(self, action):
        self.steps += 1
        if self.steps >= self.max_steps:
            return StepResult(Observation("finished", []), 0.0, True, {"success": False, "truncated": True})
        if action == "go[up]" and self.k < 3:
            self.k += 1
            return StepResult(Observation(f"counter at {WORDS[self.k]}", list(ACTIONS)), 0.0, False, {"success": False})
        if action == "go[done]":
            ok = self.k == self.target
            return StepResult(Observation("finished", []), float(ok), True, {"success": ok})
        return StepResult(Observation(f"counter at {WORDS[self.k]}", list(ACTIONS)), 0.0, False,
                          {"invalid": True, "success": False})


class CounterOracle:
    def __init__(self, eps=0.0, seed=0, name="oracle"):
        self.eps, self.rng = eps, random.Random(seed)

    def begin(self, tasks):
        self.tasks = list(tasks)

    def act(self, observations):
        out = []
        for task, o in zip(self.tasks, observations):
            if o is None:
                out.append(None)
            elif self.rng.random() < self.eps:
                out.append(self.rng.choice(ACTIONS))
            else:
                out.append("go[done]" if o.text.endswith(WORDS[task.goal["target"]]) else "go[up]")
        return out


class CounterRandom(CounterOracle):
    def __init__(self, seed=0):
        super().__init__(1.0, seed)


class CounterEnv(SerialVecEnv):
    instructions = "You count."

    def __init__(self, max_steps=5):
        def tasks(split):
            splits = {s: [Task(f"count-{s}-{i}", f"count to {WORDS[1 + i % 3]}", {"target": 1 + i % 3})
                          for i in range(base, base + n)]
                      for s, n, base in (("train", 60, 0), ("val", 12, 500), ("test", 12, 1000))}
            return pick_split(splits, split, "counter")

        super().__init__(lambda: Counter(max_steps), tasks, max_steps)

    def scripted_agent(self, name, seed=0, eps=0.3):
        return scripted_agent_by_name(name, seed, eps, CounterOracle, CounterRandom)

    def explain(self, t):
        if t.action == "go[done]":
            return f"stopping ends the count with reward {t.reward:.2f}"
        return "going up adds one to the counter"

    def corpus(self):
        return ACTIONS + ["finished counter at stopping ends the count with reward going up adds one to"]


@register("counter")
def make_counter(max_steps=5):
    return CounterEnv(max_steps)


def check_splits(make_env, sizes=None):
    """The split contract: train, val and test are non-empty, disjoint (no task id in two splits) and fixed (a
    second build gives the same tasks in the same order); an unknown split is an error naming the known ones."""
    a, b = make_env(), make_env()
    ids = {s: [t.task_id for t in a.tasks(s)] for s in ("train", "val", "test")}
    for s, got in ids.items():
        assert got, f"split {s} is empty"
        assert len(set(got)) == len(got), f"split {s} repeats a task"
        assert got == [t.task_id for t in b.tasks(s)], f"split {s} changed between two builds"
        assert [t.instruction for t in a.tasks(s)] == [t.instruction for t in b.tasks(s)]
    assert not set(ids["train"]) & set(ids["val"]), "train and val share tasks"
    assert not set(ids["train"]) & set(ids["test"]), "train and test share tasks"
    assert not set(ids["val"]) & set(ids["test"]), "val and test share tasks"
    if sizes is not None:
        assert {s: len(v) for s, v in ids.items()} == sizes
    with pytest.raises((KeyError, ValueError), match="val"):
        a.tasks("validation")
    return ids


def test_split_contract_toy_and_webshop():
    check_splits(lambda: make_vec_env("counter"), {"train": 60, "val": 12, "test": 12})
    ids = check_splits(lambda: make_vec_env("webshop", num_products=100, num_test=50, num_val=30),
                       {"train": 120, "val": 30, "test": 50})
    # growing val takes goals from train only: the test goals stay where they were
    more = make_vec_env("webshop", num_products=100, num_test=50, num_val=40)
    assert [t.task_id for t in more.tasks("test")] == ids["test"]
    assert [t.task_id for t in more.tasks("val")][:30] == ids["val"]
    assert set(t.task_id for t in more.tasks("train")) < set(ids["train"])


def test_val_tail_takes_the_last_tasks_of_train():
    train = [Task(f"t{i}", f"task {i}") for i in range(25)]
    rest, val = val_tail(train)
    assert [t.task_id for t in val] == ["t23", "t24"] and rest == train[:23]
    rest, val = val_tail(train, 5)
    assert [t.task_id for t in val] == [f"t{i}" for i in range(20, 25)] and len(rest) == 20
    with pytest.raises(ValueError, match="env.num_val"):
        val_tail(train, 25)


def test_a_missing_contract_method_fails_when_the_env_is_built():
    class NoExplain(SerialVecEnv):
        def scripted_agent(self, name, seed=0, eps=0.3):
            return None

        def corpus(self):
            return []

    with pytest.raises(TypeError, match="explain"):
        NoExplain(lambda: Counter(5), lambda split: [], 5)

    @register("half_env")
    def make_half():
        class Half:  # duck-typed, without the method-side of the contract
            max_steps = 3

            def tasks(self, split):
                return []

        return Half()

    with pytest.raises(TypeError, match="env.name: environment 'half_env' .*'reset'.*'explain'"):
        make_vec_env("half_env")
    assert isinstance(make_vec_env("counter"), Environment)


def test_toy_env_runs_the_pipeline(tmp_path):
    cfg = compose(["stages=[collect,sft,experience,synthetic_rl,eval]", "model.hidden_size=32", "model.num_layers=1",
                   "model.num_heads=2", "model.intermediate_size=64", "collect.agents.oracle=30",
                   "collect.agents.noisy_oracle=20", "collect.agents.random=10", "sft.max_steps=30", "sft.warmup_steps=1",
                   "sft.num_trajectories=20", "sft.copy_steps=2", "experience.max_steps=5", "experience.warmup_steps=1",
                   "experience.judge_steps=8", "experience.max_new_tokens=40", "experience.onpolicy_episodes=8",
                   "experience.outcome_steps=2", "synthetic_rl.synthetic_budget=24",
                   "synthetic_rl.tasks_per_iter=4", "algo.group_size=2", "algo.mini_batch_size=16",
                   "algo.max_new_tokens=8", "curriculum.train_examples=10", "eval.num_goals=12", "eval.val_goals=6", "eval.batch_size=12",
                   "eval.curve_every=0", "trainer.enable_progress_bar=false"])
    OmegaConf.update(cfg, "env", {"name": "counter", "max_steps": 5}, merge=False)
    m = run_pipeline(cfg, tmp_path)
    assert m["collect/oracle_success_rate"] == 1.0 and m["collect/random_success_rate"] < 1.0
    assert m["experience/judged_steps"] > 0 and m["synthetic_rl/synthetic_transitions"] >= 24
    assert 0.0 <= m["eval/success_rate"] <= 1.0 and m["eval/num_goals"] == 12
    for stage in ("sft", "synthetic_rl", "eval"):
        assert 0.0 <= m[f"{stage}/val_success_rate"] <= 1.0 and m[f"{stage}/val_num_goals"] == 6
    assert m["budget/real_transitions"] == m["collect/real_transitions"] + m["experience/real_transitions"]
