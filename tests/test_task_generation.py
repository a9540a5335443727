"""Grounded task generation: real-variation training pairs (same WebShop product type, same TextWorld quest
kind), the envs' validity checks of generated instructions, and the tokenizer round trip of real instructions."""

import random

import pytest

from dreamgym_pl.core import Task
from dreamgym_pl.curriculum import detokenize, text_key, variation_pairs
from dreamgym_pl.envs.base import Environment, make_vec_env, root_goal
from dreamgym_pl.envs.textworld_tasks import entity_problem, quest_kind
from dreamgym_pl.envs.webshop.goals import (feasible, parse_instruction, products_by_type, split_known,
                                            variation_problem)


def product(asin, ptype, attrs, options, price):
    return {"asin": asin, "name": f"acme {ptype}", "query": ptype, "Attributes": attrs, "options": options,
            "Price": price}


JERKY = [product("b01", "beef jerky", ["high protein", "keto friendly", "gluten free"],
                 {"flavor": ["original", "spicy"], "size": ["12 ounce", "1 pound"]}, 14.5),
         product("b02", "beef jerky", ["ready to eat", "plug and play"], {"flavor": ["original"]}, 31.0)]
BY_TYPE = {"beef jerky": JERKY, "granola": [product("b03", "granola", ["organic"], {"flavor": ["chocolate"]}, 5.0)]}
SEED_GOAL = {"query": "beef jerky", "name": "acme beef jerky", "attributes": ["high protein"],
             "goal_options": {"flavor": "spicy"}, "price_upper": 20.0}


@pytest.fixture(scope="module")
def shop():
    return make_vec_env("webshop", num_products=150, num_test=40, num_val=20)


def test_parse_instruction_hand_written():
    goal, why = parse_instruction("find me keto friendly and high protein beef jerky with flavor: spicy, and size: "
                                  "12 ounce, and price lower than 20.00 dollars", "beef jerky", JERKY)
    assert why is None
    assert goal == {"query": "beef jerky", "attributes": ["keto friendly", "high protein"],
                    "goal_options": {"flavor": "spicy", "size": "12 ounce"}, "price_upper": 20.0}
    goal, why = parse_instruction("i want plug and play beef jerky, and price lower than 40 dollars", "beef jerky", JERKY)
    assert goal == {"query": "beef jerky", "attributes": ["plug and play"], "goal_options": {}, "price_upper": 40.0}
    assert parse_instruction("i need beef jerky, and price lower than 9.50 dollars", "beef jerky", JERKY)[0][
        "attributes"] == []


@pytest.mark.parametrize("text, why", [
    # the example: another product type, a price that is no number, the price clause twice
    ("find me friendly granola with flavor: chocolate, and size: 12 ounce, and price lower than 9 standard, and "
     "price lower than 50.00 dollars", "not a beef jerky: 'friendly granola'"),
    ("i need high protein beef jerky, and price lower than 9 standard dollars", "price '9 standard' is not a positive number"),
    ("i need high protein beef jerky, and price lower than 0 dollars", "price '0' is not a positive number"),
    ("i need friendly beef jerky, and price lower than 20.00 dollars", "unknown attributes 'friendly' for beef jerky"),
    ("i need high protein beef jerky with flavor: mint, and price lower than 20.00 dollars",
     "option 'flavor: mint' is not one of a beef jerky's"),
    ("i need high protein beef jerky with flavor: spicy, and flavor: original, and price lower than 20.00 dollars",
     "option 'flavor: original' is not one of a beef jerky's"),
    ("high protein beef jerky for 20 dollars", None),  # form message checked below
])
def test_parse_instruction_rejects_with_reason(text, why):
    goal, got = parse_instruction(text, "beef jerky", JERKY)
    assert goal is None
    assert got == why if why is not None else got.startswith("not of the form")


def test_split_known_reads_phrases_holding_and():
    known = {"plug and play", "play", "plug", "ready to eat"}
    assert split_known("plug and play and ready to eat", known) == ["plug and play", "ready to eat"]
    assert split_known("", known) == []
    assert split_known("plug and chew", known) is None


def test_feasible_and_variation_problem():
    ok = {"attributes": ["keto friendly"], "goal_options": {"flavor": "spicy"}, "price_upper": 20.0}
    assert feasible(ok, JERKY)
    assert not feasible({**ok, "price_upper": 10.0}, JERKY)  # b01 costs 14.50
    assert not feasible({**ok, "attributes": ["keto friendly", "ready to eat"]}, JERKY)  # on different products
    assert variation_problem("i want keto friendly beef jerky with flavor: spicy, and price lower than 20.00 dollars",
                             SEED_GOAL, BY_TYPE) is None
    assert (variation_problem("i want keto friendly beef jerky with flavor: spicy, and price lower than 10.00 dollars",
                              SEED_GOAL, BY_TYPE) == "no beef jerky of the catalogue fulfils it")
    assert variation_problem("i need organic granola, and price lower than 10.00 dollars", SEED_GOAL,
                             BY_TYPE) == "not a beef jerky: 'organic granola'"


def test_webshop_training_pairs_share_the_product_type(shop):
    train = shop.tasks("train")
    pairs = variation_pairs(train, shop.task_family, 300, random.Random(0))
    assert len(pairs) == 300
    assert all(a.goal["query"] == b.goal["query"] and a.instruction != b.instruction for a, b in pairs)
    assert len({a.goal["query"] for a, _ in pairs}) > 20  # many product types, not one
    assert len({shop.task_family(t) for t in train}) > len({t.goal["category"] for t in train})


def test_webshop_real_goals_are_valid_and_survive_the_tokenizer(shop):
    """Every real instruction reads back as a valid variation of itself, and decoding it through the word
    tokenizer then detokenising gives it back character for character."""
    from dreamgym_pl.models import train_word_tokenizer

    tasks = [t for s in ("train", "val", "test") for t in shop.tasks(s)]
    tok = train_word_tokenizer(shop.corpus() + [t.instruction for t in tasks])
    for t in tasks:
        decoded = tok.decode(tok(t.instruction, add_special_tokens=False)["input_ids"])
        assert detokenize(decoded) == t.instruction and text_key(decoded) == text_key(t.instruction)
        assert shop.check_generated_task(detokenize(decoded), t) is None


def test_webshop_check_of_a_generated_seed_uses_its_root_goal(shop):
    t = shop.tasks("train")[0]
    gen = Task("gen-0", "x", {"generated": True, "parent_goal": {"generated": True, "parent_goal": t.goal}}, t.task_id, 2)
    assert root_goal(gen.goal) is t.goal
    assert shop.task_family(gen) == t.goal["query"]
    assert shop.check_generated_task(t.instruction, gen) is None
    other = next(x for x in shop.tasks("train") if x.goal["query"] != t.goal["query"])
    assert shop.check_generated_task(other.instruction, gen).startswith(f"not a {t.goal['query']}")


def test_quest_kind_hand_computed():
    assert quest_kind(["go south", "take keycard", "unlock box with keycard"]) == "unlock"
    assert quest_kind(["open safe", "take mat from safe", "insert mat into basket"]) == "insert"
    assert quest_kind([]) is None


def test_entity_problem_hand_written():
    own = ["type X box", "type X latchkey", "bedroom", "shelf"]
    others = own + ["box", "latchkey", "kitchen", "chest"]
    assert entity_problem("Take the type x latchkey and unlock the type x box in the bedroom.", own, others) is None
    assert entity_problem("go east and open the chest in the bedroom.", own, others) == "names 'chest', which its game lacks"
    assert entity_problem("go east. that's it!", own, others) == "names no object or room of its game"
    assert entity_problem("anything at all", [], others) is None  # a game without entities (ALFWorld): no check
    assert entity_problem("put it on the shelf of the kitchenette", own, others) is None  # not `kitchen`


def test_default_contract_accepts_and_families_by_category():
    class Bare(Environment):
        def tasks(self, split): return []
        def reset(self, tasks): return []
        def step(self, actions): return []
        def scripted_agent(self, name, seed=0, eps=0.3): return None
        def explain(self, t): return ""
        def corpus(self): return []

    env, t = Bare(), Task("t", "do it", {"category": "chores"})
    assert env.check_generated_task("anything", t) is None
    assert env.task_family(Task("g", "x", {"generated": True, "parent_goal": t.goal})) == "chores"


def test_generation_examples_text():
    from dreamgym_pl.stages.callbacks import generation_examples_text

    text = generation_examples_text([("buy tea", "buy `green` tea", "accepted"), ("buy jam", "x", "rejected: no tag")])
    assert text == "**accepted**: `buy tea` -> `buy 'green' tea`\n\n**rejected: no tag**: `buy jam` -> `x`"


@pytest.mark.parametrize("mode", ["none", "prompt", "slot"])
def test_experience_stage_trains_the_generator_on_same_type_pairs(shop, mode):
    """The experience stage's task-generation samples: prompt = the seed, target = `<task> variation </task>`,
    the variation of the seed's product type, and after decoding + detokenising the real instruction itself.
    With `curriculum.family` prompt or slot, the prompt ends with the seed's product type and `<task>`, the
    target holds the rest (slot: the type written `<family>`, never the type's words)."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from dreamgym_pl.curriculum import FAMILY_SLOT, generated_text, parse_generated_task
    from dreamgym_pl.experience.format import atomic_tags
    from dreamgym_pl.models import train_word_tokenizer
    from dreamgym_pl.stages.experience import task_generation_examples

    train = shop.tasks("train")
    prompt_words = "seed task : write a new task that is challenging but feasible , meaningfully different and realistic"
    tok = train_word_tokenizer(shop.corpus() + [t.instruction for t in train] + [prompt_words],
                               atomic_words=atomic_tags() + [FAMILY_SLOT])
    run = SimpleNamespace(cfg=OmegaConf.create({"curriculum": {"train_examples": 60, "family": mode}, "seed": 0}),
                          env=shop)
    samples = task_generation_examples(run, tok)
    assert len(samples) == 60
    by_text = {t.instruction: t for t in train}
    for s in samples:
        prompt = tok.decode(s.prompt_ids)
        seed_text = prompt.split("seed task : ", 1)[1].split(" write a new task", 1)[0]
        response = tok.decode(s.response_ids, skip_special_tokens=True)
        seed = next(t for t in train if text_key(t.instruction) == text_key(seed_text))
        ptype = seed.goal["query"]
        if mode != "none":
            assert prompt.endswith(f"{ptype} <task>")
        if mode == "slot":
            assert FAMILY_SLOT in response and f" {ptype} " not in f" {response} "
        variation = parse_generated_task(generated_text(response, ptype, mode))
        assert variation in by_text and variation != seed.instruction
        assert by_text[variation].goal["query"] == seed.goal["query"]
