"""experience.ending_rules: WebShop's ending check by hand values and against the real env (it never rules out a
real success), the rule in judge_endings, the synthetic env and the open-loop check."""

import collections

from dreamgym_pl.core import Observation, Task, Trajectory, Transition
from dreamgym_pl.envs import make_vec_env
from dreamgym_pl.envs.base import Environment
from dreamgym_pl.envs.webshop.ending_rules import (clicked_since_opened, ending_check, option_chosen, price_bound,
                                                   shown_price, wanted_options)
from dreamgym_pl.experience.fidelity import open_loop_steps
from dreamgym_pl.experience.format import STOP, ExperienceFormat, ParsedStep, build_target
from dreamgym_pl.experience.outcome import ending_verdicts, judge_endings
from dreamgym_pl.experience.synthetic_env import SyntheticEnv
from dreamgym_pl.rollout.collector import run_episodes
from dreamgym_pl.rollout.sampling import SamplingParams
from tests.test_experience import ScriptedEngine

FMT = ExperienceFormat(k=0, reasoning=False)
INSTR = "find me anti aging body lotion with color: coral, and size: pack of 12, and price lower than 20.00 dollars"
RESULTS = "back to search [SEP] page 1 (total results: 50) [SEP] next > [SEP] item 1 [SEP] corvo lotion [SEP] $12.00"
ITEM = ("back to search [SEP] < prev [SEP] color: [SEP] coral [SEP] red [SEP] size: [SEP] pack of 12 [SEP] small "
        "[SEP] corvo lotion [SEP] price: $12.00 [SEP] description [SEP] features [SEP] reviews [SEP] buy now")
# the same pages as the tiny word tokenizer detokenises them in a synthetic episode
RESULTS_SPACED = "back to search [SEP] page 1 ( total results : 5 0 ) [SEP] item 1 [SEP] corvo lotion [SEP] $ 1 2 . 0 0"
ITEM_SPACED = "back to search [SEP] < prev [SEP] color ( coral ) : [SEP] coral [SEP] size : [SEP] pack of 1 2 " \
              "[SEP] corvo lotion [SEP] price : $ 2 4 . 5 0 [SEP] buy now"


def test_instruction_and_page_parts_hand_values():
    assert wanted_options(INSTR) == ["coral", "pack of 12"]
    assert wanted_options("i need green tea, and price lower than 30.00 dollars") == []
    assert price_bound(INSTR) == 20.0
    assert price_bound("i want tea, and price lower than 5 0 . 0 0 dollars") == 50.0
    assert price_bound("buy tea") is None
    assert shown_price(ITEM) == 12.0
    assert shown_price(ITEM_SPACED) == 24.5
    assert shown_price(RESULTS) is None  # a results page lists prices without `price:`
    assert option_chosen("pack of 12", ["pack of 1 2"]) and option_chosen("coral", ["description", "coral"])
    assert not option_chosen("coral", ["red"]) and not option_chosen("coral", [])


def test_clicks_count_from_the_product_the_episode_opened_last():
    hist = [("search", "search[lotion]"), (RESULTS, "click[item 1]"), (ITEM, "click[coral]"),
            (ITEM, "click[< prev]"), (RESULTS, "click[item 1]"), (ITEM, "click[pack of 12]"),
            (ITEM, "click[description]"), ("description page", "click[< prev]")]
    assert clicked_since_opened(hist) == ["pack of 12", "description", "< prev"]  # reopening the item forgets coral
    assert clicked_since_opened(hist + [(ITEM, "click[back to search]")]) == []
    assert clicked_since_opened(hist + [("search", "search[tea]")]) == []
    assert clicked_since_opened([(RESULTS_SPACED, "click [ item 1 ]"), (ITEM_SPACED, "click [ coral ]")]) == ["coral"]


def test_ending_check_hand_cases():
    opened = [("search", "search[lotion]"), (RESULTS, "click[item 1]")]
    both = opened + [(ITEM, "click[coral]"), (ITEM, "click[pack of 12]")]
    assert ending_check(INSTR, both + [(ITEM, "click[buy now]")]) is None
    assert ending_check(INSTR, both + [(ITEM, "click [ buy now ]")]) is None
    assert ending_check(INSTR, opened + [(ITEM, "click[coral]"), (ITEM, "click[buy now]")]) == "option pack of 12 not chosen"
    assert ending_check(INSTR, both + [(ITEM.replace("$12.00", "$20.01"), "click[buy now]")]) == "price 20.01 over 20.00"
    assert ending_check(INSTR, both + [(ITEM.replace("$12.00", "$20.00"), "click[buy now]")]) is None  # lower or equal
    assert ending_check(INSTR, both + [(ITEM, "click[coral]")]) == "not a purchase"
    assert ending_check(INSTR, []) == "no action"
    spaced = [(RESULTS_SPACED, "click [ item 1 ]"), (ITEM_SPACED, "click [ coral ]"), (ITEM_SPACED, "click [ pack of 1 2 ]"),
              (ITEM_SPACED, "click [ buy now ]")]
    assert ending_check(INSTR, spaced) == "price 24.50 over 20.00"
    assert ending_check(INSTR.replace("20.00", "30.00"), spaced) is None


def test_the_rules_never_rule_out_a_real_success_and_catch_most_failures():
    env = make_vec_env("webshop", num_products=300, num_test=50, num_val=50, results_per_page=3, max_steps=10,
                       show_instruction=False, product_ids="index")
    tasks = env.tasks("train")[:120]
    counts = collections.Counter()
    for name in ("oracle", "noisy_oracle", "near_miss"):
        for tr in run_episodes(env, tasks, env.scripted_agent(name, seed=0, eps=0.3), batch_size=64):
            last = tr.transitions[-1]
            out = env.ending_check(last.task, [(t.state.text, t.action) for t in tr.transitions])
            ok = bool(last.info.get("success"))
            counts[("success" if ok else "failure", out is not None)] += 1
    assert counts[("success", True)] == 0 and counts[("success", False)] > 100
    failures = counts[("failure", True)] + counts[("failure", False)]
    assert failures > 50 and counts[("failure", True)] > 0.8 * failures  # near misses: options and price


def test_the_default_contract_rules_nothing_out():
    assert Environment.ending_check(None, Task("a", "a"), [("s", "click[buy now]")]) is None


def test_judge_endings_pays_a_ruled_out_ending_as_a_failure():
    obs = Observation("x", [])
    parsed = [ParsedStep(obs, 1.0, True), ParsedStep(obs, 1.0, True), ParsedStep(obs, 0.3, True), ParsedStep(obs, 0.0, False)]
    items = [(f"t{i}", "s", "a") for i in range(4)]
    calls = []

    def outcome(xs):
        calls.append(list(xs))
        return [(0.9, 0.7), (0.9, 0.6), (0.2, 0.3)]

    free, ruled = ending_verdicts(parsed, items, outcome, [True, False, True, False])
    assert len(calls) == 1  # one call for both verdicts
    assert [p.reward for p in free] == [1.0, 1.0, 0.3, 0.0]
    assert [p.reward for p in ruled] == [0.7, 1.0, 0.3, 0.0]  # the graded reward, kept below 1
    assert [p.reward for p in judge_endings(parsed, items, outcome, [True, False, True, False])] == [0.7, 1.0, 0.3, 0.0]
    # without an outcome model a predicted success that is ruled out pays 0; a predicted failure keeps its reward
    assert [p.reward for p in judge_endings(parsed, items, None, [True, False, True, False])] == [0.0, 1.0, 0.3, 0.0]
    assert judge_endings(parsed, items, None) == parsed


def test_synthetic_env_pays_a_ruled_out_purchase_as_a_failure():
    bought = build_target(Observation("thank you", []), 1.0, True, "", FMT)
    shop = make_vec_env("webshop", num_products=50, num_test=10, num_val=10)
    page = Observation(ITEM, ["click[coral]", "click[pack of 12]", "click[buy now]"])

    def run(check):
        stay = build_target(page, 0.0, False, "", FMT)
        env = SyntheticEnv(ScriptedEngine([stay, stay, bought, bought]), None, FMT, lambda t: page, lambda s: [], shop.is_admissible,
                           SamplingParams(temperature=0.7, max_new_tokens=160, stop=list(STOP)),
                           outcome=lambda items: [(0.9, 0.8)] * len(items), ending_check=check)
        env.reset([Task("a", INSTR), Task("b", INSTR.replace(", and size: pack of 12", ""))])
        env.step(["click[coral]", "click[coral]"])
        return env, env.step(["click[buy now]", "click[buy now]"])

    env, r = run(shop.ending_check)
    assert r[0].done and r[0].reward == 0.8 and not r[0].info["success"]  # pack of 12 never clicked
    assert r[1].done and r[1].reward == 1.0 and r[1].info["success"]
    assert env.stats["endings"] == 2 and env.stats["ending_ruled_out"] == 1
    env, r = run(None)
    assert r[0].reward == 1.0 and r[1].reward == 1.0 and "ending_ruled_out" not in env.stats


def test_open_loop_steps_rule_out_real_failures_as_the_synthetic_env_does():
    task = Task("a", INSTR)
    steps = [("search", "search[lotion]", RESULTS), (RESULTS, "click[item 1]", ITEM), (ITEM, "click[coral]", ITEM),
             (ITEM, "click[buy now]", "thank you")]
    traj = Trajectory(task, [Transition(task, i, Observation(s, []), a, Observation(n, []), 0.0, i == 3,
                                        info={"success": False}) for i, (s, a, n) in enumerate(steps)])
    outs = [build_target(Observation(n, []), 1.0 if i == 3 else 0.0, i == 3, "", FMT) for i, (_, _, n) in enumerate(steps)]
    seen = []

    def check(t, hist):
        seen.append(list(hist))
        return ending_check(t.instruction, hist)

    parsed, refs, _, _ = open_loop_steps(ScriptedEngine(outs), [traj], lambda t: [], FMT, 160, ending_check=check)
    assert seen == [[(s, a) for s, a, _ in steps]]  # the real history up to the ending, checked at the ending only
    assert parsed[3].done and parsed[3].reward == 0.0  # the model said success; pack of 12 was never clicked
    parsed, _, _, _ = open_loop_steps(ScriptedEngine(outs), [traj], lambda t: [], FMT, 160)
    assert parsed[3].reward == 1.0
