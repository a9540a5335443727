import pytest

from dreamgym_pl.envs.webshop.reward import (attribute_matches, option_matches, purchase_reward, title_nouns,
                                             type_reward)

GOAL = {"attributes": ["long lasting", "paraben free"], "goal_options": {"color": "red"}, "price_upper": 30.0,
        "query": "lipstick", "product_category": "beauty › makeup › lipstick", "name": "acme deluxe lipstick"}


def product(**kw):
    p = {"Attributes": ["long lasting"], "Title": "acme deluxe lipstick paraben free", "name": "acme deluxe lipstick",
         "BulletPoints": [], "Description": "", "Price": 25.0, "query": "lipstick",
         "product_category": "beauty › makeup › lipstick"}
    p.update(kw)
    return p


def test_full_match_attribute_via_title_substring():
    r = purchase_reward(product(), ["red"], GOAL)
    assert r["n_attr_match"] == 2  # "long lasting" fuzzy, "paraben free" by title substring
    assert r["reward"] == pytest.approx(1.0)


def test_price_over_bound():
    r = purchase_reward(product(Price=35.0), ["red"], GOAL)
    assert r["r_price"] == 0.0
    assert r["reward"] == pytest.approx(3 / 4)


def test_missing_option_and_attribute():
    p = product(Title="acme deluxe lipstick")  # "paraben free" now nowhere
    r = purchase_reward(p, ["pink"], GOAL)
    assert r["reward"] == pytest.approx((1 + 0 + 1) / 4)


def test_fuzzy_option_match():
    assert option_matches(["Red"], ["red"]) == 1
    assert option_matches(["dark red"], ["red"]) == 1  # token_set_ratio of a subset is 100
    assert option_matches(["x-large"], ["large"]) == 0  # ratio 83.3 <= 85
    assert option_matches(["pink"], ["red"]) == 0


def test_attribute_fuzzy_and_description():
    p = product(Attributes=["long-lasting formula"], Title="t", Description="it is paraben free")
    assert attribute_matches(p, ["long lasting"]) == 0 + 0  # token sets differ: no fuzzy match, no substring
    assert attribute_matches(p, ["paraben free"]) == 1  # description substring


def test_title_nouns_drop_modifiers():
    assert title_nouns("Acme Deluxe Lipstick, Red") == ["acme", "lipstick"]


@pytest.mark.parametrize("purchased_name,expected", [
    ("acme premium shampoo", 1.0),  # 1/2 nouns shared > 0.2
    ("zulu shampoo", 0.0),          # no shared noun
])
def test_type_reward_overlap(purchased_name, expected):
    purchased = {"name": purchased_name, "query": "shampoo", "product_category": "beauty › hair care › shampoo"}
    assert type_reward(purchased, GOAL) == expected


def test_type_reward_half_and_tenth():
    goal6 = {"name": "alpha bravo charlie delta echo foxtrot", "query": "q1", "product_category": "a › b › c"}
    p = {"name": "alpha zulu", "query": "q2", "product_category": "x › y › c"}
    assert type_reward(p, goal6) == 0.5  # 1/6 = 0.167: no match, not below 0.1
    goal11 = {"name": "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo", "query": "q1",
              "product_category": "a › b › c"}
    assert type_reward(p, goal11) == 0.1  # 1/11 < 0.1
    p_cat = {"name": "alpha zulu", "query": "q2", "product_category": "a › b › z"}
    assert type_reward(p_cat, goal6) == 1.0  # two shared category levels


def test_type_reward_multiplies():
    p = product(name="zulu shampoo", query="shampoo", product_category="x › y › shampoo")
    assert purchase_reward(p, ["red"], GOAL)["reward"] == 0.0


def _failed_purchases_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / "diagnostics" / "webshop_failed_purchases.py"
    spec = importlib.util.spec_from_file_location("webshop_failed_purchases", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bought_position_and_invalid_loop_hand_cases():
    from types import SimpleNamespace as NS

    mod = _failed_purchases_module()

    def traj(*steps):
        return NS(transitions=[NS(action=a, info={"invalid": bad}) for a, bad in steps])

    # item 1 clicked, back to the results, item 3 clicked (an invalid click[item 2] in between is not a click)
    t = traj(("search[red mug]", False), ("click[item 1]", False), ("click[< prev]", False),
             ("click[item 2]", True), ("click[ item 3 ]", False), ("click[buy now]", False))
    assert mod.bought_position(t) == "item 3"
    assert mod.bought_position(traj(("search[x]", False))) == ""
    assert mod.invalid_loop(traj(("a", False), ("click[x]", True), ("click[x]", True), ("click[x]", True)))
    assert not mod.invalid_loop(traj(("click[y]", True), ("click[x]", True), ("click[x]", True)))  # two actions
    assert not mod.invalid_loop(traj(("click[x]", True), ("click[x]", False), ("click[x]", True)))  # one valid
    assert not mod.invalid_loop(traj(("click[x]", True), ("click[x]", True)))  # shorter than n


def test_failed_purchase_parts_hand_computed():
    mod = _failed_purchases_module()
    ok = {"r_type": 1.0, "n_attr_match": 2, "n_attrs": 2, "n_option_match": 1, "n_options": 1, "r_price": 1.0}
    assert mod.failed_parts(ok) == []
    assert mod.failed_parts({**ok, "r_type": 0.5, "n_option_match": 0, "r_price": 0.0}) == ["type", "options", "price"]
    assert mod.failed_parts({**ok, "n_attr_match": 1}) == ["attributes"]
