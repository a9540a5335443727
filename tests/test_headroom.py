"""pass@k and the GRPO-signal shares against hand-computed values."""

import pytest

from dreamgym_pl.headroom import headroom, pass_at_k, signal_share


def test_pass_at_k_hand_values():
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)      # C(3,2)/C(4,2) fail
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)     # C(3,2)/C(5,2)
    assert pass_at_k(3, 2, 2) == 1.0                           # two draws from three cannot both miss
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_signal_share_and_headroom():
    assert signal_share([[1, 1], [0, 1], [0.5, 0.5], [0.2, 0.7]]) == 0.5
    assert signal_share([]) == 0.0
    h = headroom([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], ks=[1, 2])
    assert h["sample_success"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert h["pass@1"] == pytest.approx(h["sample_success"])
    assert h["pass@2"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert (h["never_solved"], h["always_solved"], h["mixed"]) == (pytest.approx(1 / 3),) * 3
    with pytest.raises(ValueError):
        headroom([], ks=[1])


def test_mixed_groups_counts_by_task():
    from dreamgym_pl.headroom import mixed_groups
    assert mixed_groups(["a", "a", "b", "b", "c"], [1.0, 0.0, 0.5, 0.5, 1.0]) == (1, 3)
    assert mixed_groups([], []) == (0, 0)


def test_webshop_ceiling_rules_on_hand_built_products():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).parents[1] / "experiments" / "diagnostics" / "webshop_ceiling.py"
    spec = importlib.util.spec_from_file_location("ceiling", path)
    c = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(c)
    goal = {"query": "tv stand", "attributes": [], "goal_options": {"color": "white"}, "price_upper": 100.0}
    dear = {"Title": "duna tv stand", "query": "tv stand", "Price": 280.0, "options": {"color": ["white"]}, "Attributes": []}
    no_white = {"Title": "vexo tv stand", "query": "tv stand", "Price": 32.0, "options": {"color": ["black"]}, "Attributes": []}
    good = {"Title": "acme tv stand", "query": "tv stand", "Price": 63.0, "options": {"color": ["black", "white"]},
            "Attributes": []}
    results = [dear, no_white, good]
    assert c.bought_reward(good, goal) == 1.0
    assert c.bought_reward(dear, goal) == pytest.approx(1 / 2)    # option yes, price no
    assert not c.rule_success(results, goal, c.RULES["result 1"])
    assert not c.rule_success(results, goal, c.RULES["first within the price bound"])   # the black-only one
    assert c.rule_success(results, goal, c.RULES["first within the bound offering the goal options"])
    assert not c.rule_success([dear], goal, c.RULES["first within the bound offering the goal options"])  # none
