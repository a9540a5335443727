"""Subject demonstrations: the experience model is shown a real transition that opened what the action opens
(`env.action_subject`; WebShop: the product a results-page click opens, by title and price), as its last
demonstration, with the whole next state."""

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from dreamgym_pl.core import Observation, Task, Transition
from dreamgym_pl.envs import make_vec_env
from dreamgym_pl.envs.webshop.vec import clicked_title
from dreamgym_pl.experience.format import ExperienceFormat, build_prompt
from dreamgym_pl.experience.module import demos_for
from dreamgym_pl.replay.buffer import ReplayBuffer
from dreamgym_pl.replay.embed import HashingEmbedder

RESULTS = ("back to search [SEP] page 1 (total results: 50) [SEP] next > [SEP] item 1 [SEP] hollis deluxe t-shirt "
           "[SEP] $3.08 [SEP] item 2 [SEP] nordly ultra green tea [SEP] $36.93")
ITEM = ("back to search [SEP] < prev [SEP] size: [SEP] small [SEP] pack of 12 [SEP] nordly ultra green tea [SEP] "
        "price: $36.93 [SEP] description [SEP] features [SEP] reviews [SEP] buy now")
NORDLY = "nordlyultragreentea $36.93"


def test_clicked_title_names_the_listed_product_by_title_and_price():
    assert clicked_title(RESULTS, "click[item 2]") == NORDLY
    assert clicked_title(RESULTS, "click[item 1]") == "hollisdeluxet-shirt $3.08"
    detok = RESULTS.replace("t-shirt", "t - shirt").replace("$3.08", "$ 3 . 08")  # the tiny tokenizer's spacing
    assert clicked_title(detok, "click [ Item 1 ]") == "hollisdeluxet-shirt $3.08"
    assert clicked_title("invalid action: x [SEP] " + RESULTS, "click[item 2]") == NORDLY
    assert clicked_title(RESULTS, "click[item 3]") is None  # not listed
    assert clicked_title(RESULTS, "click[next >]") is None
    assert clicked_title(RESULTS, "search[green tea]") is None
    assert clicked_title(ITEM, "click[small]") is None  # not a results page
    assert clicked_title(RESULTS.replace("item 2", "b00123"), "click[b00123]") == NORDLY


@pytest.mark.parametrize("ids,options", [("index", False), ("asin", False), ("index", True)])
def test_clicked_title_on_rendered_results_pages(ids, options):
    shop = make_vec_env("webshop", num_products=60, num_test=5, num_val=5, product_ids=ids, show_result_options=options,
                        results_per_page=3)
    task = shop.tasks("train")[0]
    shop.reset([task])
    page = shop.step(["search[" + task.goal["query"] + "]"])[0].observation
    handle = page.admissible[-1][len("click["):-1]
    p = shop.engine.products[shop.engine.by_asin[page.refs[handle]]]
    want = "".join(p["Title"].lower().split()) + " $" + f"{p['Price']:.2f}"
    assert shop.action_subject(page.text, f"click[{handle}]") == want
    item = shop.step([f"click[{handle}]"])[0].observation
    assert all(shop.action_subject(item.text, a) is None for a in item.admissible)


def step(task, state, action, nxt, episode):
    return Transition(task=Task(task, f"buy {task} tea"), step=1, state=Observation(state), action=action,
                      next_state=Observation(nxt), reward=0.0, done=False, info={"episode": episode})


def buffer_with_subjects(max_size=None):
    buf = ReplayBuffer(HashingEmbedder(64), capacity=16, max_size=max_size)
    buf.set_subject(clicked_title)
    buf.add([step("a", "search", "search[tea]", RESULTS, "e0"),
             step("a", RESULTS, "click[item 2]", ITEM, "e0"),                    # row 1: opens nordly
             step("b", RESULTS, "click[item 1]", "hollis page", "e1"),
             step("c", RESULTS, "click[item 2]", ITEM + " second", "e2")], "offline")  # row 3: opens nordly
    buf.add([step("d", RESULTS, "click[item 2]", "synthetic page", "e3")], "synthetic")
    return buf


def test_subject_rows_are_real_and_respect_the_exclusions():
    buf = buffer_with_subjects()
    assert buf.subject_rows[NORDLY] == [1, 3]  # the synthetic row 4 is never a page to copy
    assert buf.subject_row(NORDLY) == 1
    assert buf.subject_row(NORDLY, exclude_task="a") == 3
    assert buf.subject_row(NORDLY, exclude_episode="e0") == 3
    assert buf.subject_row(NORDLY, exclude_task="a", exclude_episode="e2") is None
    assert buf.subject_row(None) is None and buf.subject_row("unknown") is None
    buf.set_subject(None)
    assert buf.subject_rows == {}


def test_evictions_leave_the_subject_rows_alone():
    buf = buffer_with_subjects(max_size=5)
    buf.add([step("e", RESULTS, "click[item 2]", "another synthetic page", "e4")], "synthetic")
    assert len(buf) == 5 and 4 in buf.deleted and buf.subject_rows[NORDLY] == [1, 3]


@pytest.mark.parametrize("exclude,own", [("task", ITEM + " second"), ("episode", ITEM + " second"), ("none", ITEM)])
def test_demos_for_puts_the_subject_last_and_marks_it(exclude, own):
    buf = buffer_with_subjects()
    fmt = ExperienceFormat(k=2, exclude=exclude, subject_demos=True)
    probe = step("z", RESULTS, "click[item 2]", "?", "e9")
    demos = demos_for(buf, probe, fmt)
    assert len(demos) == 2 and demos[1].next_state.text == ITEM and demos[1].info["subject_demo"]
    assert not demos[0].info.get("subject_demo") and demos[0] is not buf.items[1]
    assert not buf.items[1].info.get("subject_demo")  # a marked copy: the stored row is untouched
    # task a's episode e0 opened nordly in row 1: excluded by task and by episode, not by none
    assert demos_for(buf, step("a", RESULTS, "click[item 2]", "?", "e0"), fmt)[1].next_state.text == own
    plain = demos_for(buf, probe, ExperienceFormat(k=2, exclude=exclude))
    assert not any(d.info.get("subject_demo") for d in plain)
    search = demos_for(buf, step("z", "search", "search[tea]", "?", "e9"), fmt)
    assert not any(d.info.get("subject_demo") for d in search)  # no subject: nearest neighbours only


def test_with_subject_keeps_k_and_drops_the_duplicate():
    buf = buffer_with_subjects()
    others = [buf.items[1], buf.items[2], buf.items[0]]
    assert [d.next_state.text for d in buf.with_subject(others, 1, 2)] == ["hollis page", ITEM]
    assert [d.next_state.text for d in buf.with_subject(others, 1, 1)] == [ITEM]
    assert buf.with_subject(others, None, 2) == others[:2]


def test_a_subject_demo_shows_its_next_state_as_the_current_state_is_shown():
    buf = buffer_with_subjects()
    probe = step("z", RESULTS, "click[item 2]", "?", "e9")
    for state_words, shown in ((100, "buy now reward"), (8, "size: ... reward")):  # ITEM: 30 words
        fmt = ExperienceFormat(k=1, demo_words=5, state_words=state_words, subject_demos=True)
        marked = build_prompt("buy tea", [], demos_for(buf, probe, fmt), probe.state, probe.action, fmt)
        assert shown in marked
    plain = build_prompt("buy tea", [], [buf.items[1]], probe.state, probe.action, fmt)
    assert "next : back to search [SEP] < ... reward" in plain  # a plain demonstration: demo_words


def full_experience():
    full = OmegaConf.load("conf/config.yaml")
    return OmegaConf.create({"experience": {**OmegaConf.to_container(full.experience), "demo_next_words": 60},
                             "replay": OmegaConf.to_container(full.replay)})


def test_load_replay_indexes_subjects_when_the_config_asks(tmp_path):
    from dreamgym_pl.stages.experience import experience_format, load_replay

    shop = make_vec_env("webshop", num_products=50, num_test=5, num_val=5)
    for on in (True, False):
        cfg = OmegaConf.create({"replay": {"embedder": "hashing", "dim": 64, "capacity": 16, "max_size": None,
                                           "subject_demos": on}})
        run = SimpleNamespace(cfg=cfg, env=shop, dir=tmp_path)
        fmt = experience_format(SimpleNamespace(cfg=OmegaConf.merge(full_experience(), cfg)))
        assert fmt.subject_demos == on and fmt.demo_next_words == 60
        buf = load_replay(run, fresh=True)
        buf.add([step("a", RESULTS, "click[item 2]", ITEM, "e0")], "offline")
        assert (buf.subject_rows == {NORDLY: [0]}) == on
        buf.save(tmp_path / "replay")
        assert (load_replay(run).subject_rows == {NORDLY: [0]}) == on  # rebuilt on load
    full = OmegaConf.load("conf/config.yaml")
    assert full.replay.subject_demos is False


def test_the_synthetic_env_shows_the_subject_page_in_its_prompt():
    from dreamgym_pl.experience.format import STOP, build_target
    from dreamgym_pl.experience.synthetic_env import SyntheticEnv
    from dreamgym_pl.rollout.sampling import Completion, SamplingParams

    class Canned:
        def __init__(self):
            self.prompts = []

        def generate(self, prompts, params):
            self.prompts += prompts
            return [Completion(build_target(Observation(ITEM, ["click[buy now]"]), 0.0, False, "", fmt), [], [])
                    for _ in prompts]

    buf = buffer_with_subjects()
    page = Observation(RESULTS, ["click[item 1]", "click[item 2]"])
    for subject_demos in (True, False):
        fmt = ExperienceFormat(k=2, demo_words=5, subject_demos=subject_demos)
        eng = Canned()
        env = SyntheticEnv(eng, buf, fmt, lambda t: page, lambda s: [], lambda a, o: True,
                           SamplingParams(temperature=0.7, max_new_tokens=16, stop=list(STOP)), enrich=False)
        env.reset([Task("a", "buy tea"), Task("z", "buy tea")])
        env.step(["click[item 2]", "click[item 2]"])
        # task a may not see its own row 1: it gets row 3 (ITEM + " second"); task z the oldest, row 1
        assert ("[SEP] reviews [SEP] buy now second reward" in eng.prompts[0]) == subject_demos
        assert (eng.prompts[1].count("buy now reward") == 1) == subject_demos


def test_demo_next_words_bounds_the_demonstrations_next_states():
    buf = buffer_with_subjects()
    probe = step("z", RESULTS, "click[item 2]", "?", "e9")
    demo = buf.items[1]
    cut = build_prompt("buy tea", [], [demo], probe.state, probe.action, ExperienceFormat(k=1, demo_words=5))
    whole = build_prompt("buy tea", [], [demo], probe.state, probe.action,
                         ExperienceFormat(k=1, demo_words=5, demo_next_words=100))
    assert "buy now reward" in whole and "buy now reward" not in cut
    assert whole.split("action :")[0] == cut.split("action :")[0]  # the demonstration's state keeps demo_words


def test_step_kinds_and_scores_by_kind():
    from dreamgym_pl.experience.fidelity import scores_by_kind, step_kind
    from dreamgym_pl.experience.format import ParsedStep

    s = step("a", RESULTS, "search[tea]", RESULTS, "e0")
    o = step("a", RESULTS, "click[item 2]", ITEM, "e0")
    e = Transition(task=Task("a", "buy tea"), step=2, state=Observation(ITEM), action="click[buy now]",
                   next_state=Observation("thank you"), reward=1.0, done=True)
    assert step_kind(s, None, False) == "search"
    assert step_kind(o, NORDLY, True) == "opens, shown" and step_kind(o, NORDLY, False) == "opens, unseen"
    assert step_kind(e, None, False) == "ends"
    assert step_kind(step("a", ITEM, "click[small]", ITEM, "e0"), None, False) == "other"
    right = ParsedStep(Observation(ITEM, ["click[buy now]"]), 0.0, False)
    wrong = ParsedStep(Observation("nothing alike", []), 0.0, False)
    res = scores_by_kind([right, wrong], [o, s], ["click[buy now]", None], [True, False], ["opens, shown", "search"])
    assert res["opens, shown"]["open_loop/state_f1"] == 1.0 and res["search"]["open_loop/state_f1"] == 0.0
    assert res["opens, shown"]["open_loop/action_recall_valid"] == 1.0
    assert res["all"]["open_loop/steps"] == 2.0 and res["all"]["open_loop/state_f1"] == 0.5


def test_subject_for_follows_the_exclusion_rule():
    buf = buffer_with_subjects()
    assert buf.subject_for(RESULTS, "click[item 2]", "task", "a") == 3
    assert buf.subject_for(RESULTS, "click[item 2]", "episode", "a", "e0") == 3
    assert buf.subject_for(RESULTS, "click[item 2]", "none", "a", "e0") == 1
    assert buf.subject_for(RESULTS, "click[next >]", "none", "a") is None
    buf.deleted.add(1)  # a deleted row is never returned
    assert buf.subject_for(RESULTS, "click[item 2]", "none", "a") == 3
    buf.set_subject(None)
    assert buf.subject_for(RESULTS, "click[item 2]", "none", "a") is None


def test_real_tools_answer_a_search_with_the_real_results_page():
    from dreamgym_pl.experience.format import STOP, build_target
    from dreamgym_pl.experience.synthetic_env import SyntheticEnv
    from dreamgym_pl.rollout.sampling import Completion, SamplingParams

    shop = make_vec_env("webshop", num_products=60, num_test=5, num_val=5, product_ids="index", results_per_page=3)
    task = shop.tasks("train")[0]
    query = "search[" + task.goal["query"] + "]"
    shop.reset([task])
    real = shop.step([query])[0].observation
    assert shop.tool_observation(task, "search [ " + task.goal["query"] + " ]") == real  # detokenised action
    assert shop.tool_observation(task, "click[item 1]") is None

    class Canned:
        def __init__(self):
            self.prompts = []

        def generate(self, prompts, params):
            self.prompts += prompts
            return [Completion(build_target(Observation("made up", ["click[buy now]"]), 0.0, False, "",
                                            ExperienceFormat()), [], []) for _ in prompts]

    for tool in (shop.tool_observation, None):
        eng = Canned()
        env = SyntheticEnv(eng, None, ExperienceFormat(k=0), shop.initial_observation, lambda s: [], shop.is_admissible,
                           SamplingParams(temperature=0.7, max_new_tokens=16, stop=list(STOP)), max_steps=5,
                           tool=tool, enrich=False)
        env.reset([task])
        r = env.step([query])[0]
        assert (r.observation == real and r.info["tool"] and not eng.prompts) if tool else r.observation.text == "made up"
        assert env.stats.get("tool_calls", 0) == (1 if tool else 0)
        if tool:
            r = env.step(["click[item 1]"])[0]  # any other action is generated, with the real page in its prompt
            assert r.observation.text == "made up" and len(eng.prompts) == 1
            assert real.text.split(" [SEP] ")[4] in eng.prompts[0]  # item 1's title
