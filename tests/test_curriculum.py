import random

import numpy as np
import pytest
from hypothesis import given, strategies as st

from dreamgym_pl.core import Task
from dreamgym_pl.curriculum import (cluster_groups, group_variances, max_generated, mix_batch, parse_generated_task,
                                    select_seeds, task_variance)


def test_variance_hand_computed():
    assert task_variance([1, 1, 1, 1]) == 0.0
    assert task_variance([0, 0, 0]) == 0.0
    assert task_variance([1, 0, 1, 0]) == 0.25
    assert task_variance([1, 0, 0, 0]) == pytest.approx(0.1875)  # mean .25: (.5625 + 3 * .0625) / 4
    assert group_variances(["a", "a", "b", "b"], [1, 0, 1, 1]) == {"a": 0.25, "b": 0.0}


def test_selection_order_and_threshold():
    v = {"a": 0.25, "b": 0.1875, "c": 0.0, "d": 0.25, "e": 0.05}
    assert select_seeds(v, 0.1, 10) == ["a", "d", "b"]
    assert select_seeds(v, 0.1, 2) == ["a", "d"]
    assert select_seeds(v, 0.3, 5) == []


@given(st.integers(1, 200), st.floats(0.0, 1.0), st.integers(0, 300))
def test_lambda_bound_holds_for_every_batch(b, lam, n_gen):
    orig = [Task(f"o{i}", "x") for i in range(250)]
    gen = [Task(f"g{i}", "y", parent_id="o0", generation=1) for i in range(n_gen)]
    batch = mix_batch(orig, gen, b, lam, random.Random(0))
    n_g = sum(1 for t in batch if t.parent_id is not None)
    assert n_g <= lam * b + 1e-9
    assert len(batch) == b
    assert n_g == min(n_gen, max_generated(b, lam))


def test_lambda_zero_generates_none_and_bad_lambda():
    orig = [Task(f"o{i}", "x") for i in range(10)]
    gen = [Task("g", "y", parent_id="o1")]
    assert all(t.parent_id is None for t in mix_batch(orig, gen, 8, 0.0, random.Random(0)))
    with pytest.raises(ValueError, match="curriculum.lambda_"):
        max_generated(8, 1.5)


def test_clusters_group_similar_rows():
    x = np.array([[1, 0], [0.99, 0.05], [0, 1], [0.02, 0.98]], dtype=np.float32)
    labels = cluster_groups(x, 2, seed=0)
    assert labels[0] == labels[1] and labels[2] == labels[3] and labels[0] != labels[2]


def test_parse_generated_task():
    assert parse_generated_task("< task > i need red tea < / task >") == "i need red tea"
    assert parse_generated_task("no tags") is None
    assert parse_generated_task("<task> </task>") is None
    assert parse_generated_task("<task> " + "w " * 50 + "</task>", max_words=40) is None


def test_generated_task_never_equals_a_held_out_instruction():
    from types import SimpleNamespace

    from dreamgym_pl.curriculum import Curriculum

    train = [Task(f"t{i}", f"buy tea {i}") for i in range(4)]
    outputs = iter([["<task> buy a test tea </task>", "<task> buy a new tea </task>"]])
    cur = Curriculum(train, lambda prompts: next(outputs)[: len(prompts)], lambda trajs: {"t0": 0.25, "t1": 0.25},
                     max_share=0.5, min_variance=0.05, num_seeds=2, batch_size=4, held_out=["buy a test tea"])
    cur.update([SimpleNamespace(task=t) for t in train])
    assert [t.instruction for t in cur.state.generated] == ["buy a new tea"] and cur.state.rejected == 1


def test_detokenize_hand_computed():
    from dreamgym_pl.curriculum import detokenize

    assert detokenize("and price lower than 5 0 . 0 0 dollars") == "and price lower than 50.00 dollars"
    assert (detokenize("find me granola with flavor : chocolate , and size : 1 2 ounce , and price lower than "
                       "2 0 . 0 0 dollars")
            == "find me granola with flavor: chocolate, and size: 12 ounce, and price lower than 20.00 dollars")
    assert detokenize("it ' s an x - large t - shirt ( pack of 2 ) .") == "it's an x-large t-shirt (pack of 2)."
    assert detokenize("  pack   of 2 ") == "pack of 2"
    assert detokenize("size 3 feet") == "size 3 feet"  # a lone digit keeps its spaces


def test_text_key_compares_decoded_and_real_alike():
    from dreamgym_pl.curriculum import text_key

    real = "i need red tea with size: 12 ounce, and price lower than 50.00 dollars"
    assert text_key("I need red tea with size : 1 2 ounce , and price lower than 5 0 . 0 0 dollars") == text_key(real)
    assert text_key(real).endswith("lower than 5 0 . 0 0 dollars")
    assert text_key("i need red tea") != text_key("i need redtea")


def test_parse_generated_task_detokenises():
    assert (parse_generated_task("<task> find me tea , and price lower than 3 0 . 0 0 dollars </task>")
            == "find me tea, and price lower than 30.00 dollars")


def test_parse_task_output_says_why():
    from dreamgym_pl.curriculum import parse_task_output

    assert parse_task_output("i need tea")[1] == "no <task> ... </task>"
    assert parse_task_output("<task> </task>")[1] == "empty task"
    assert parse_task_output("<task> " + "w " * 5 + "</task>", max_words=4)[1] == "over 4 words"
    assert parse_task_output("<task> w w w w </task>", max_words=4) == ("w w w w", None)


def test_judge_generation_flags_and_reasons():
    from dreamgym_pl.curriculum import judge_generation, text_key

    seed = Task("s", "buy tea")
    known = {text_key("buy tea"), text_key("buy 12 teas")}
    no_coffee = lambda instr, seed: "coffee" if "coffee" in instr else None  # noqa: E731
    assert judge_generation("buy", seed, known, no_coffee) == (None, {"parsed": False, "valid": False, "new": False},
                                                               "no <task> ... </task>")
    assert judge_generation("<task> buy 1 2 teas </task>", seed, known, no_coffee) == (
        "buy 12 teas", {"parsed": True, "valid": True, "new": False}, "an existing instruction")
    assert judge_generation("<task> buy coffee </task>", seed, known, no_coffee) == (
        "buy coffee", {"parsed": True, "valid": False, "new": True}, "coffee")
    assert judge_generation("<task> buy green tea </task>", seed, known, no_coffee) == (
        "buy green tea", {"parsed": True, "valid": True, "new": True}, None)


def test_variation_pairs_stay_in_the_family_and_skip_singletons():
    from dreamgym_pl.curriculum import variation_pairs

    tasks = [Task("a1", "tea a", {"category": "tea"}), Task("a2", "tea b", {"category": "tea"}),
             Task("a3", "tea a", {"category": "tea"}),  # same text as a1: never a1's variation
             Task("b1", "chair", {"category": "chair"})]  # alone in its family: never a seed
    pairs = variation_pairs(tasks, lambda t: t.goal["category"], 200, random.Random(0))
    assert len(pairs) == 200
    assert {(a.task_id, b.instruction) for a, b in pairs} == {("a1", "tea b"), ("a2", "tea a"), ("a3", "tea b")}
    assert variation_pairs(tasks[3:], lambda t: t.goal["category"], 10, random.Random(0)) == []


def test_curriculum_logs_shares_examples_and_roots_lineage():
    from types import SimpleNamespace

    from dreamgym_pl.curriculum import Curriculum

    train = [Task("t0", "buy tea", {"category": "tea"}), Task("t1", "buy mugs", {"category": "mug"}),
             Task("t2", "buy jam", {"category": "jam"}), Task("t3", "buy 12 cups", {"category": "cup"})]
    outputs = iter([["<task> buy green tea </task>", "<task> buy 1 2 cups </task>", "nothing",
                     "<task> buy a chair </task>"]])
    cur = Curriculum(train, lambda prompts: next(outputs)[: len(prompts)],
                     lambda trajs: {"t0": 0.25, "t1": 0.25, "t2": 0.2, "t3": 0.1}, max_share=0.5, min_variance=0.05,
                     num_seeds=4, batch_size=4, check_task=lambda instr, seed: "a chair" if "chair" in instr else None)
    cur.update([SimpleNamespace(task=t) for t in train])
    assert [t.instruction for t in cur.state.generated] == ["buy green tea"]
    logs = cur.last_logs
    assert (logs["curriculum/parsed_share"], logs["curriculum/valid_share"], logs["curriculum/new_share"],
            logs["curriculum/rejected_share"]) == (0.75, 0.5, 0.5, 0.75)
    assert cur.state.rejected == 3
    assert cur.totals() == {"curriculum/generation_attempts": 4.0, "curriculum/generation_valid_share": 0.5,
                            "curriculum/generation_new_share": 0.5, "curriculum/generation_rejected_share": 0.75,
                            "curriculum/generation_accept_share": 0.25}
    assert cur.last_examples == [("buy tea", "buy green tea", "accepted"),
                                 ("buy mugs", "buy 12 cups", "rejected: an existing instruction"),
                                 ("buy jam", "nothing", "rejected: no <task> ... </task>"),
                                 ("buy 12 cups", "buy a chair", "rejected: a chair")]
    # a variation of a variation is played from the root's goal
    gen = cur.state.generated[0]
    assert gen.goal == {"generated": True, "parent_goal": {"category": "tea"}}
    grand = cur._variation(gen, "buy black tea")
    assert grand.goal["parent_goal"] == {"category": "tea"} and grand.generation == 2 and grand.parent_id == gen.task_id


def test_usable_hand_computed():
    from dreamgym_pl.curriculum import usable

    gen = [Task(f"g{i}", "y", parent_id="o0", generation=1) for i in range(3)]
    uses = {"g0": 2, "g1": 1}
    assert [t.task_id for t in usable(gen, uses, 0)] == ["g0", "g1", "g2"]  # no limit
    assert [t.task_id for t in usable(gen, uses, 1)] == ["g2"]
    assert [t.task_id for t in usable(gen, uses, 2)] == ["g1", "g2"]
    with pytest.raises(ValueError, match="curriculum.max_uses"):
        usable(gen, uses, -1)


def _two_generated(max_uses):
    from types import SimpleNamespace

    from dreamgym_pl.curriculum import Curriculum

    train = [Task(f"t{i}", f"buy tea {i}") for i in range(6)]
    outputs = iter([["<task> buy green tea </task>", "<task> buy black tea </task>"]])
    cur = Curriculum(train, lambda prompts: next(outputs)[: len(prompts)], lambda trajs: {"t0": 0.25, "t1": 0.25},
                     max_share=0.5, min_variance=0.05, num_seeds=2, batch_size=4, max_uses=max_uses)
    first = cur.sample([SimpleNamespace(task=t) for t in train])
    return cur, first, [cur.sample(None) for _ in range(2)]


def test_max_uses_limits_how_often_a_generated_task_joins_a_batch():
    # no limit: both generated tasks (floor(0.5 * 4) = 2) join every batch
    cur, first, rest = _two_generated(0)
    assert [sum(t.parent_id is not None for t in b) for b in [first, *rest]] == [2, 2, 2]
    assert cur.state.uses == {"gen-0": 3, "gen-1": 3} and cur.state.shares == [0.5, 0.5, 0.5]
    # one use each: the next batches hold original tasks only
    cur, first, rest = _two_generated(1)
    assert [sum(t.parent_id is not None for t in b) for b in [first, *rest]] == [2, 0, 0]
    assert cur.state.uses == {"gen-0": 1, "gen-1": 1} and all(len(b) == 4 for b in rest)
    assert cur.state.shares == [0.5, 0.0, 0.0]


def test_each_seed_gets_one_generation_judged_and_an_accepted_one_joins():
    from types import SimpleNamespace

    from dreamgym_pl.curriculum import Curriculum

    train = [Task(f"t{i}", f"buy tea {i}") for i in range(6)]
    asked = []

    def generate(prompts):
        asked.extend(prompts)
        return ["<task> buy green tea </task>", "<task> buy coffee </task>"]  # t0's is good, t1's the check refuses

    cur = Curriculum(train, generate, lambda trajs: {"t0": 0.25, "t1": 0.1875}, max_share=0.5, min_variance=0.05,
                     num_seeds=2, batch_size=4, max_uses=1,
                     check_task=lambda instr, seed: None if "tea" in instr else "not a tea")
    first = cur.sample([SimpleNamespace(task=t) for t in train])
    assert len(asked) == 2 and "buy tea 0" in asked[0] and "buy tea 1" in asked[1]
    assert [(t.instruction, t.parent_id) for t in cur.state.generated] == [("buy green tea", "t0")]
    assert (cur.state.attempts, cur.state.accepted, cur.state.rejected) == (2, 1, 1)
    assert cur.totals()["curriculum/generation_valid_share"] == pytest.approx(1 / 2)
    assert sum(t.parent_id is not None for t in first) == 1


def test_family_modes_hand_written():
    from dreamgym_pl.curriculum import generated_text, parse_task_output, task_generation_prompt, task_generation_target

    plain = task_generation_prompt("buy tea")
    assert plain == ("seed task : buy tea \nwrite a new task that is challenging but feasible , meaningfully "
                     "different and realistic : ")
    assert task_generation_prompt("buy tea", "green tea", "prompt") == plain + "green tea <task>"
    assert task_generation_prompt("buy tea", "green tea", "slot") == plain + "green tea <task>"
    assert task_generation_prompt("buy tea", "green tea", "none") == plain
    assert task_generation_target("buy green tea", "green tea", "none") == "<task> buy green tea </task>"
    assert task_generation_target("buy green tea", "green tea", "prompt") == " buy green tea </task>"
    assert task_generation_target("buy Green Tea bags", "green tea", "slot") == " buy <family> bags </task>"
    assert task_generation_target("buy green teapots", "green tea", "slot") == " buy green teapots </task>"  # whole words
    read = lambda text, mode: parse_task_output(generated_text(text, "green tea", mode))
    assert read("<task> buy jam </task>", "none") == ("buy jam", None)
    assert read(" buy jam </task>", "prompt") == ("buy jam", None)
    assert read(" buy <family> bags </task>", "slot") == ("buy green tea bags", None)
    assert read("buy <family>, and price lower than 5 dollars </task>", "slot") == (
        "buy green tea, and price lower than 5 dollars", None)
    assert read(" buy jam </task>", "none") == (None, "no <task> ... </task>")
    with pytest.raises(ValueError, match="curriculum.family"):
        task_generation_target("x", "y", "first")


def test_curriculum_names_each_seeds_family_in_its_prompt():
    from types import SimpleNamespace

    from dreamgym_pl.curriculum import Curriculum

    train = [Task("t0", "buy tea", {"category": "tea"}), Task("t1", "buy mugs", {"category": "mug"})]
    seen: list[list[str]] = []

    def generate(prompts):
        seen.append(prompts)
        return [" buy green <family> </task>", " buy blue mugs"][: len(prompts)]

    cur = Curriculum(train, generate, lambda trajs: {"t0": 0.25, "t1": 0.2}, max_share=0.5, min_variance=0.05,
                     num_seeds=2, batch_size=4, family=lambda t: t.goal["category"], family_mode="slot")
    cur.update([SimpleNamespace(task=t) for t in train])
    assert [p.rsplit(": ", 1)[1] for p in seen[0]] == ["tea <task>", "mug <task>"]
    assert [t.instruction for t in cur.state.generated] == ["buy green tea"]
    assert cur.last_examples[1] == ("buy mugs", "<task> buy blue mugs", "rejected: no <task> ... </task>")
    with pytest.raises(ValueError, match="needs the env's task_family"):
        Curriculum(train, generate, lambda trajs: {}, 0.5, 0.05, 2, 4, family_mode="prompt")
