"""Browser environments: tree reduction, admissible actions, action normalisation, scripted oracles (pure), a
real headless chromium playing MiniWoB++ episodes, and the clear WebArena error."""

import pytest

from dreamgym_pl.envs.browser import (TEST_SEED_BASE, VAL_SEED_BASE, BrowserSetupError, admissible_actions,
                                      browser_reasoning, find_chromium, make_webarena, miniwob_splits,
                                      normalize_action, reduce_tree, webarena_train_val)
from dreamgym_pl.envs.miniwob_agents import elements, miniwob_oracle_action

FLAT = """RootWebArea 'Login User Task', focused, url='file:///x/login-user.html'
\t[14] paragraph ''
\t\t[15] LabelText ''
\t\t\tStaticText 'Username'
\t\t\t\tInlineTextBox 'Username'
\t\t[16] textbox ''
\t[17] paragraph ''
\t\t[18] LabelText ''
\t\t\tStaticText 'Password'
\t\t[19] textbox ''
\tInlineTextBox ''
\t[20] button 'Login'
\t[21] tab 'Tab #2', expanded=False, selected=False, controls='tabs-2'"""


def test_reduce_tree_keeps_ids_and_text_only():
    tree = reduce_tree(FLAT)
    assert tree.split("\n") == ["Username", "[16] textbox ''", "Password", "[19] textbox ''", "[20] button 'Login'",
                                "[21] tab 'Tab #2', expanded=False, selected=False"]
    assert elements(tree)[2] == ("20", "button", "Login")


def test_admissible_actions_by_role():
    assert admissible_actions(reduce_tree(FLAT)) == ["click('16')", "fill('16', TEXT)", "click('19')",
                                                     "fill('19', TEXT)", "click('20')", "click('21')"]


@pytest.mark.parametrize("raw,norm", [("click ( ' 13 ' )", "click('13')"), ("fill ( ' 12 ' , ' keli ' )", "fill('12', 'keli')"),
                                      ("click ( ' 1 3 ' )", "click('13')"), ("click ( ' a 1 2 ' )", "click('a12')"),
                                      ("fill ( ' 1 2 ' , ' room 1 0 4 , x - large ' )", "fill('12', 'room 104, x-large')"),
                                      ('fill("12", "a b")', "fill('12', 'a b')"), ("noop ( )", "noop()"),
                                      ("nonsense", "nonsense")])
def test_normalize_action(raw, norm):
    assert normalize_action(raw) == norm


def test_actions_survive_the_word_tokenizer():
    """What the tiny policy can emit: decode(encode(action)) of the word tokenizer (digits split one a
    token, punctuation isolated, tokens joined by spaces) normalises back to the exact action."""
    from dreamgym_pl.models import train_word_tokenizer

    actions = ["click('13')", "click('7')", "fill('102', 'keli')", "fill('21', 'room 104, x-large')", "noop()"]
    tok = train_word_tokenizer(actions)
    for a in actions:
        decoded = tok.decode(tok(a, add_special_tokens=False)["input_ids"], skip_special_tokens=True)
        assert decoded != a or a == "noop()"
        assert normalize_action(decoded) == a


def test_oracles_read_goal_and_tree():
    tree = reduce_tree(FLAT)
    goal = 'Enter the username "keli" and the password "yobHF" into the text fields and press login.'
    done: list[str] = []
    for want in ["fill('16', 'keli')", "fill('19', 'yobHF')", "click('20')"]:
        a = miniwob_oracle_action("login-user", goal, tree, done)
        assert a == want
        done.append(a)
    boxes = "[18] checkbox 'ab', checked='false'\nab\n[21] checkbox 'cd', checked='false'\n[27] button 'Submit'"
    goal = "Select cd and click Submit."
    assert miniwob_oracle_action("click-checkboxes", goal, boxes, []) == "click('21')"
    assert miniwob_oracle_action("click-checkboxes", goal, boxes, ["click('21')"]) == "click('27')"
    seq = "[12] button 'ONE'\n[13] button 'TWO'"
    assert miniwob_oracle_action("click-button-sequence", "Click button ONE, then click button TWO.", seq, ["x"]) == "click('13')"


def test_reasoning_from_step_info():
    from dreamgym_pl.core import Observation, Task, Transition

    t = Task("miniwob-train-enter-text-1", "miniwob enter text")
    mk = lambda info, done=False: Transition(t, 0, Observation("x"), "click('9')", Observation("y"), 0.0, done, info=info)  # noqa: E731
    assert "fails" in browser_reasoning(mk({"error": "ValueError: Could not find element"}))
    assert "reward 1.00" in browser_reasoning(mk({"success": True}, True))
    assert browser_reasoning(mk({}, True)).endswith("reward is 0.00")


def test_webarena_without_servers_says_what_to_set(monkeypatch):
    for v in ("WA_SHOPPING", "WA_GITLAB"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(BrowserSetupError, match="WA_SHOPPING"):
        make_webarena()


def test_miniwob_splits_are_disjoint_seed_ranges():
    names = ["enter-text", "click-checkboxes"]
    train, test, val = miniwob_splits(names, 20, 5, 3)
    assert (len(train), len(test), len(val)) == (40, 10, 6)
    ids = [{t.task_id for t in s} for s in (train, test, val)]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert {t.goal["seed"] for t in val} == {VAL_SEED_BASE + i for i in range(3)}
    assert {t.goal["seed"] for t in test} == {TEST_SEED_BASE + i for i in range(5)}
    assert [t.task_id for t in miniwob_splits(names, 20, 5, 3)[2]] == [t.task_id for t in val]  # fixed
    with pytest.raises(ValueError, match="env.val_seeds"):
        miniwob_splits(names, 20, 5, VAL_SEED_BASE)


def test_webarena_val_from_the_split_file_or_the_train_tail():
    train, val = webarena_train_val({"train": list(range(20)), "test": [100, 101]})
    assert val == [18, 19] and train == list(range(18))
    train, val = webarena_train_val({"train": [1, 2, 3], "val": [7], "test": [9]})
    assert (train, val) == ([1, 2, 3], [7])
    with pytest.raises(ValueError, match="env.split_file: val ids"):
        webarena_train_val({"train": [1, 2], "val": [2], "test": [9]})


@pytest.fixture(scope="module")
def miniwob_env():
    if find_chromium() is None:
        pytest.skip("no chromium on this machine (make browser installs it)")
    from dreamgym_pl.envs.base import make_vec_env

    env = make_vec_env("miniwob", tasks=["enter-text", "click-checkboxes"], train_seeds=1, test_seeds=1, workers=2,
                       slots_per_worker=1)
    yield env
    env.close()


def test_real_browser_oracle_random_and_invalid(miniwob_env):
    from dreamgym_pl.agents import make_agent
    from dreamgym_pl.rollout.collector import episode_stats, run_episodes

    tasks = miniwob_env.tasks("test")
    oracle = run_episodes(miniwob_env, tasks, make_agent("oracle", 0, env=miniwob_env), batch_size=4)
    assert episode_stats(oracle)["success_rate"] == 1.0
    first = oracle[0].transitions[0]
    assert first.state.text.startswith("goal : ") and first.state.admissible and "InlineTextBox" not in first.state.text
    obs = miniwob_env.reset(tasks[:1])[0]
    r = miniwob_env.step(["click('9999')"])[0]
    assert r.info["invalid"] and "9999" in r.info["error"] and not r.done
    assert obs.refs["goal"] and obs.text.startswith("goal : ")


@pytest.mark.slow
def test_miniwob_s2r_pipeline_tiny(tmp_path):
    """conf=miniwob_s2r end to end at the smallest scale in a real browser."""
    if find_chromium() is None:
        pytest.skip("no chromium on this machine (make browser installs it)")
    from dreamgym_pl.pipeline import run_pipeline
    from tests.conftest import compose
    from tests.test_pipeline import EXP, TINY

    tiny = [o for o in TINY if not o.startswith(("env.", "eval.batch_size", "++collect.agents.hasty"))]
    env = ["env.tasks=[enter-text,click-button]", "env.train_seeds=3", "env.test_seeds=1", "eval.num_goals=2",
           "collect.agents.oracle=6", "collect.agents.noisy_oracle=2", "collect.agents.random=2", "sft.num_trajectories=6"]
    m = run_pipeline(compose(["conf=miniwob_s2r", *tiny, *EXP, *env, "synthetic_rl.synthetic_budget=16",
                              "s2r.real_budget=16", "s2r.tasks_per_iter=2", "synthetic_rl.tasks_per_iter=2"]), tmp_path)
    assert m["collect/oracle_success_rate"] == 1.0
    assert m["synthetic_rl/real_transitions"] == 0 and m["synthetic_rl/synthetic_transitions"] >= 16
    assert m["budget/real_transitions"] == m["collect/real_transitions"] + m.get("experience/real_transitions", 0) + m["s2r/real_transitions"]
    assert 0 < m["s2r/real_transitions"] <= 16  # s2r.budget_cap: one task of 2 episodes of <= 8 steps fits
    for k in ("sft/test_success_rate", "synthetic_rl/test_success_rate", "s2r/test_success_rate", "eval/success_rate"):
        assert 0.0 <= m[k] <= 1.0
