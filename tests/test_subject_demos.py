"""Subject demonstrations: the experience model is shown a real transition that opened what the action opens
(`env.action_subject`; WebShop: the product a results-page click opens), first among its demonstrations."""

from dreamgym_pl.core import Observation, Task, Transition
from dreamgym_pl.envs.webshop.vec import clicked_title
from dreamgym_pl.experience.format import ExperienceFormat, build_prompt
from dreamgym_pl.experience.module import demos_for
from dreamgym_pl.replay.buffer import ReplayBuffer
from dreamgym_pl.replay.embed import HashingEmbedder

RESULTS = ("back to search [SEP] page 1 (total results: 50) [SEP] next > [SEP] item 1 [SEP] hollis deluxe green tea "
           "[SEP] $3.08 [SEP] item 2 [SEP] nordly ultra green tea [SEP] $36.93")
ITEM = ("back to search [SEP] < prev [SEP] size: [SEP] small [SEP] pack of 12 [SEP] nordly ultra green tea [SEP] "
        "price: $36.93 [SEP] description [SEP] features [SEP] reviews [SEP] buy now")


def test_clicked_title_reads_the_listed_title():
    assert clicked_title(RESULTS, "click[item 2]") == "nordly ultra green tea"
    assert clicked_title(RESULTS, "click [ Item 1 ]") == "hollis deluxe green tea"  # detokenised model text
    assert clicked_title("invalid action: x [SEP] " + RESULTS, "click[item 1]") == "hollis deluxe green tea"
    assert clicked_title(RESULTS, "click[item 3]") is None  # not listed
    assert clicked_title(RESULTS, "click[next >]") is None
    assert clicked_title(RESULTS, "search[green tea]") is None
    assert clicked_title(ITEM, "click[small]") is None  # not a results page
    assert clicked_title(RESULTS.replace("item 2", "b00123"), "click[b00123]") == "nordly ultra green tea"


def step(task, state, action, nxt, episode):
    return Transition(task=Task(task, f"buy {task} tea"), step=1, state=Observation(state), action=action,
                      next_state=Observation(nxt), reward=0.0, done=False, info={"episode": episode})


def buffer_with_subjects():
    buf = ReplayBuffer(HashingEmbedder(64), capacity=16)
    buf.set_subject(clicked_title)
    buf.add([step("a", "search", "search[tea]", RESULTS, "e0"),
             step("a", RESULTS, "click[item 2]", ITEM, "e0"),                    # row 1: opens nordly
             step("b", RESULTS.replace("item 2", "item 1", 1), "click[item 1]", "hollis page", "e1"),
             step("c", RESULTS, "click[item 2]", ITEM + " second", "e2")], "offline")  # row 3: opens nordly
    buf.add([step("d", RESULTS, "click[item 2]", "synthetic page", "e3")], "synthetic")
    return buf


def test_subject_rows_and_their_exclusions():
    buf = buffer_with_subjects()
    assert buf.subject_rows["nordly ultra green tea"] == [1, 3, 4]
    assert buf.subject_row("nordly ultra green tea") == 1
    assert buf.subject_row("nordly ultra green tea", exclude_task="a") == 3
    assert buf.subject_row("nordly ultra green tea", exclude_episode="e0") == 3
    assert buf.subject_row("nordly ultra green tea", real_only=True, exclude_task="a") == 3
    buf.set_subject(None)
    assert buf.subject_rows == {}


def test_demos_for_puts_the_subject_first_and_marks_it():
    buf = buffer_with_subjects()
    probe = step("z", RESULTS, "click[item 2]", "?", "e9")
    fmt = ExperienceFormat(k=2, exclude="task", subject_demos=True)
    demos = demos_for(buf, probe, fmt)
    assert len(demos) == 2 and demos[0].next_state.text == ITEM and demos[0].info["subject_demo"]
    assert not buf.items[1].info.get("subject_demo")  # a marked copy: the stored row is untouched
    assert demos[1] is not buf.items[1]
    own = demos_for(buf, step("a", RESULTS, "click[item 2]", "?", "e9"), fmt)
    assert own[0].next_state.text == ITEM + " second"  # task a's own row is excluded
    plain = demos_for(buf, probe, ExperienceFormat(k=2, exclude="task"))
    assert not any(d.info.get("subject_demo") for d in plain)
    search = demos_for(buf, step("z", "search", "search[tea]", "?", "e9"), fmt)
    assert not any(d.info.get("subject_demo") for d in search)  # no subject: nearest neighbours only


def test_with_subject_keeps_k_and_drops_the_duplicate():
    buf = buffer_with_subjects()
    others = [buf.items[1], buf.items[2], buf.items[0]]
    out = buf.with_subject(others, 1, 2)
    assert [d.next_state.text for d in out] == [ITEM, "hollis page"]
    assert buf.with_subject(others, None, 2) == others[:2]


def test_a_subject_demo_shows_its_whole_next_state():
    buf = buffer_with_subjects()
    fmt = ExperienceFormat(k=1, demo_words=5, state_words=100, subject_demos=True)
    probe = step("z", RESULTS, "click[item 2]", "?", "e9")
    marked = build_prompt("buy tea", [], demos_for(buf, probe, fmt), probe.state, probe.action, fmt)
    plain = build_prompt("buy tea", [], [buf.items[1]], probe.state, probe.action, fmt)
    assert "buy now reward" in marked and "buy now" not in plain.split("next :")[1].split("reward")[0]


def test_the_subject_index_is_rebuilt_after_a_reload(tmp_path):
    buf = buffer_with_subjects()
    buf.save(tmp_path / "r")
    again = ReplayBuffer.load(tmp_path / "r", HashingEmbedder(64))
    assert again.subject_rows == {}
    again.set_subject(clicked_title)
    assert again.subject_rows == buf.subject_rows


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
    for subject_demos, shown in ((True, True), (False, False)):
        fmt = ExperienceFormat(k=2, demo_words=5, subject_demos=subject_demos)
        eng = Canned()
        env = SyntheticEnv(eng, buf, fmt, lambda t: page, lambda s: [], lambda a, o: True,
                           SamplingParams(temperature=0.7, max_new_tokens=16, stop=list(STOP)), enrich=False)
        env.reset([Task("a", "buy tea"), Task("z", "buy tea")])
        env.step(["click[item 2]", "click[item 2]"])
        # task a may not see its own row 1: it gets row 3 (ITEM + " second"); task z the oldest, row 1
        assert ("price: $36.93 [SEP] description [SEP] features [SEP] reviews [SEP] buy now second" in eng.prompts[0]) == shown
        assert (eng.prompts[1].count("buy now reward") == 1) == shown
