"""TextWorld adapter: text cleaning, command matching, generation determinism, reset/step, agents, errors."""

import json

import pytest

pytest.importorskip("textworld")

from dreamgym_pl.agents import make_agent  # noqa: E402
from dreamgym_pl.core import Observation, Task, Transition  # noqa: E402
from dreamgym_pl.envs.base import make_vec_env  # noqa: E402
from dreamgym_pl.envs.alfworld import make_alfworld  # noqa: E402
from dreamgym_pl.envs.textworld import (GameDataError, clean_feedback, generate_games, generation_options,  # noqa: E402
                                        match_command, normalize_command, read_game, strip_banner,
                                        TEST_SEED_BASE, VAL_SEED_BASE, TextWorldVecEnv, textworld_reasoning)
from dreamgym_pl.rollout.collector import episode_stats, run_episodes  # noqa: E402

BANNER = ("\n\n\n                    ________  ________  __    __\n                   |        \\|        \\|  \\  |  \\\n"
          "                    \\$$$$$$$$| $$$$$$$$| $$  | $$\n              \\$$      \\$$  \\$$$$$$  \\$$ \n\n"
          "Get the key. Then open the chest.\n\n-= Attic =-\nYou are in an attic.\n\n>   -= Attic =-0/1")


def test_strip_banner_and_clean_feedback():
    assert strip_banner(BANNER).lstrip().startswith("Get the key.")
    assert clean_feedback(BANNER, "Get the key. Then open the chest.") == "-= Attic =- You are in an attic."
    assert clean_feedback("\nYou open the chest.\n\n>        -= Attic =-1/3") == "You open the chest."
    assert strip_banner("a plain line\nanother") == "a plain line\nanother"  # no banner: unchanged


def test_command_matching_is_spacing_and_case_insensitive():
    adm = ["take TextWorld-style key", "go east", "put apple on shelf"]
    assert normalize_command("Take  textworld - style   key") == "take textworld-style key"
    assert match_command("take textworld - style key", adm) == "take TextWorld-style key"
    assert match_command("GO EAST ", adm) == "go east"
    assert match_command("go west", adm) is None


def _tr(action, info, next_text="You open the chest.", reward=0.0):
    task = Task("tw-train-1", "open the chest")
    return Transition(task, 0, Observation("-= Attic =-"), action, Observation(next_text), reward, False, info=info)


def test_rule_based_reasoning_for_text_games():
    assert "not possible" in textworld_reasoning(_tr("dance", {"invalid": True}))
    assert "game is won and the reward is 1.00" in textworld_reasoning(_tr("open chest", {"won": True}, reward=1.0))
    r = textworld_reasoning(_tr("go east", {"room_before": "attic", "room_after": "kitchen", "score_delta": 0}))
    assert r.startswith("the command moves the player from the attic to the kitchen") and r.endswith("reward is 0.00")
    r = textworld_reasoning(_tr("take key", {"room_before": "attic", "room_after": "attic", "score_delta": 1,
                                             "score": 1, "max_score": 3}, "You pick up the key."))
    assert "you pick up the key" in r and "score rises to 1 of 3" in r
    env = TextWorldVecEnv([], [], 20, False, val=[])
    assert env.explain(_tr("dance", {"invalid": True})) == textworld_reasoning(_tr("dance", {"invalid": True}))


@pytest.fixture(scope="module")
def tw_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("twcache")


@pytest.fixture(scope="module")
def tw_env(tw_cache):
    return make_vec_env("textworld", num_train=4, num_test=2, num_val=2, nb_rooms=2, nb_objects=4, quest_length=2,
                        cache_dir=str(tw_cache), progress=False)


def test_generation_is_deterministic(tmp_path):
    opts = generation_options(2, 4, 2)
    a = read_game(generate_games(tmp_path / "a", [7], opts, workers=1, progress=False)[0])
    b = read_game(generate_games(tmp_path / "b", [7], opts, workers=1, progress=False)[0])
    c = read_game(generate_games(tmp_path / "c", [8], opts, workers=1, progress=False)[0])
    assert a == b and a["walkthrough"]
    ja = json.loads((tmp_path / "a" / "game_7.json").read_text())
    jb = json.loads((tmp_path / "b" / "game_7.json").read_text())
    assert ja["world"] == jb["world"] and ja["quests"] == jb["quests"]
    assert (a["objective"], a["walkthrough"]) != (c["objective"], c["walkthrough"])


def test_splits_are_disjoint_and_cached(tw_env, tw_cache):
    from tests.test_env_contract import check_splits

    train, val, test = tw_env.tasks("train"), tw_env.tasks("val"), tw_env.tasks("test")
    assert len(train) == 4 and len(val) == 2 and len(test) == 2
    seeds = [{t.goal["seed"] for t in s} for s in (train, val, test)]
    assert not (seeds[0] & seeds[1] or seeds[0] & seeds[2] or seeds[1] & seeds[2])
    assert seeds[1] == {VAL_SEED_BASE, VAL_SEED_BASE + 1} and seeds[2] == {TEST_SEED_BASE, TEST_SEED_BASE + 1}
    mtimes = {p: p.stat().st_mtime for p in tw_cache.glob("*/*.z8")}
    make = lambda: make_vec_env("textworld", num_train=4, num_test=2, num_val=2, nb_rooms=2, nb_objects=4,  # noqa: E731
                                quest_length=2, cache_dir=str(tw_cache), progress=False)
    check_splits(make, {"train": 4, "val": 2, "test": 2})
    assert [t.instruction for t in make().tasks("train")] == [t.instruction for t in train]
    assert {p: p.stat().st_mtime for p in tw_cache.glob("*/*.z8")} == mtimes  # nothing regenerated


def test_reset_step_admissible_and_invalid(tw_env):
    task = tw_env.tasks("train")[0]
    obs = tw_env.reset([task])[0]
    assert obs.admissible and "$$" not in obs.text and task.instruction not in obs.text
    assert obs.refs["next_command"] in obs.admissible
    r = tw_env.step(["dance wildly"])[0]
    assert r.info["invalid"] and r.reward == 0.0 and not r.done
    walk = task.goal["walkthrough"]
    for i, cmd in enumerate(walk):
        r = tw_env.step([cmd.upper()])[0]  # case differences still match the admissible command
        assert not r.info["invalid"]
    assert r.done and r.reward == 1.0 and r.info["won"]
    assert tw_env.step([None]) == [None]


def test_max_steps_truncates(tw_cache):
    env = make_vec_env("textworld", num_train=4, num_test=2, num_val=2, nb_rooms=2, nb_objects=4, quest_length=2,
                       cache_dir=str(tw_cache), progress=False, max_steps=2)
    env.reset(env.tasks("train")[:1])
    env.step(["look"])
    r = env.step(["look"])[0]
    assert r.done and r.info.get("truncated") and r.reward == 0.0


def test_oracle_wins_random_does_worse(tw_env):
    tasks = tw_env.tasks("train") + tw_env.tasks("test")
    oracle = episode_stats(run_episodes(tw_env, tasks, make_agent("oracle", 0, env=tw_env)))
    assert oracle["success_rate"] == 1.0 and oracle["invalid_action_rate"] == 0.0
    noisy = run_episodes(tw_env, tasks, make_agent("noisy_oracle", 0, eps=1.0, env=tw_env))
    assert all(s.action in s.state.admissible for t in noisy for s in t.transitions)


def test_missing_and_broken_games_are_named(tw_env, tw_cache, tmp_path):
    with pytest.raises(GameDataError, match="game_99.z8"):
        read_game(tmp_path / "game_99.z8")
    src = next(tw_cache.glob("*/game_1.z8"))
    (tmp_path / "game_1.z8").write_bytes(src.read_bytes())
    (tmp_path / "game_1.json").write_text("{not json")
    with pytest.raises(GameDataError, match="game_1.json"):
        read_game(tmp_path / "game_1.z8")
    broken = Task("tw-train-x", "x", goal={"game": str(tmp_path / "nowhere.z8")})
    with pytest.raises(GameDataError, match="nowhere.z8"):
        tw_env.reset([broken])


def test_alfworld_without_data_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    with pytest.raises(GameDataError, match="ALFWORLD_DATA"):
        make_alfworld()


@pytest.mark.slow
def test_textworld_s2r_pipeline_tiny(tmp_path, tw_cache):
    """conf=textworld_s2r end to end at the smallest scale (TextWorld games, experience model, S2R)."""
    from dreamgym_pl.pipeline import run_pipeline
    from tests.conftest import compose
    from tests.test_pipeline import EXP, TINY

    tiny = [o for o in TINY if not o.startswith(("env.", "++collect.agents.hasty"))]
    env = ["env.num_train=4", "env.num_test=2", "env.num_val=2", "env.nb_rooms=2", "env.nb_objects=4", "env.quest_length=2",
           f"env.cache_dir={tw_cache}", "env.progress=false", "env.max_steps=6", "eval.num_goals=2"]
    m = run_pipeline(compose(["conf=textworld_s2r", *tiny, *EXP, *env, "collect.agents.oracle=8",
                              "collect.agents.noisy_oracle=4", "collect.agents.random=4"]), tmp_path)
    assert m["synthetic_rl/real_transitions"] == 0 and m["synthetic_rl/synthetic_transitions"] >= 40
    assert m["budget/real_transitions"] == m["collect/real_transitions"] + m.get("experience/real_transitions", 0) + m["s2r/real_transitions"]
    for k in ("sft/test_success_rate", "synthetic_rl/test_success_rate", "s2r/test_success_rate", "eval/success_rate"):
        assert 0.0 <= m[k] <= 1.0


def test_generated_task_starts_in_its_parents_game(tw_env):
    """Curriculum variations of a text-game task are played from the parent's game (synthetic env start)."""
    from dreamgym_pl.stages.synthetic_rl import initial_observation

    parent = tw_env.tasks("train")[1]
    gen = Task("gen-0", "take the key and open the chest", goal={"generated": True, "parent_goal": parent.goal},
               parent_id=parent.task_id, generation=1)
    assert initial_observation(tw_env, gen).text == tw_env.reset([parent])[0].text


def test_families_are_quest_kinds_and_real_objectives_are_grounded(tw_env):
    """A text game's family is the verb of its winning command; its own objective passes the check of generated
    tasks for its game, another game's objective (other objects) does not."""
    from dreamgym_pl.curriculum import detokenize

    tasks = [t for s in ("train", "val", "test") for t in tw_env.tasks(s)]
    for t in tasks:
        assert tw_env.task_family(t) == t.goal["walkthrough"][-1].split()[0].lower()
        assert tw_env.check_generated_task(detokenize(t.instruction.lower()), t) is None
    a, b = tasks[0], next(t for t in tasks[1:] if not set(t.goal["entities"]) <= set(tasks[0].goal["entities"]))
    assert tw_env.check_generated_task(b.instruction, a) is not None
