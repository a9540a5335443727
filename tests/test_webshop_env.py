import pytest

from dreamgym_pl.agents import make_agent
from dreamgym_pl.envs import make_vec_env
from dreamgym_pl.envs.webshop import WebShopEngine, WebShopEnv, parse_action
from dreamgym_pl.envs.webshop.agents import goal_query, near_miss_action
from dreamgym_pl.envs.webshop.catalogue import generate_catalogue, load_webshop_products
from dreamgym_pl.envs.webshop.goals import price_bounds
from dreamgym_pl.rollout.collector import episode_stats, run_episodes


def test_parse_action():
    assert parse_action("click [ Next > ]") == ("click", "next >")
    assert parse_action("search[ red  lipstick ]") == ("search", "red lipstick")
    assert parse_action("buy it") is None
    assert parse_action("click[]") is None


def test_price_bounds():
    assert price_bounds(23.5) == [30.0, 40.0, 50.0]
    assert price_bounds(30.0) == [40.0, 50.0, 60.0]


def test_determinism():
    a = WebShopEngine(num_products=100, seed=3, num_test=50, num_val=20)
    b = WebShopEngine(num_products=100, seed=3, num_test=50, num_val=20)
    assert a.products == b.products
    assert [t.instruction for t in a.goals] == [t.instruction for t in b.goals]
    c = WebShopEngine(num_products=100, seed=4, num_test=50, num_val=20)
    assert a.products != c.products
    ea, eb = WebShopEnv(a), WebShopEnv(b)
    task = a.tasks("test")[0]
    assert ea.reset(task).text == eb.reset(task).text
    for act in (f"search[{goal_query(task)}]", f"click[{task.goal['asin']}]", "click[buy now]"):
        ra, rb = ea.step(act), eb.step(act)
        assert ra.observation.text == rb.observation.text and ra.reward == rb.reward


def test_fixed_split(shop):
    """test = the first num_test goals, val = the next num_val (default 200), train = the rest: disjoint, and
    growing val never moves a test goal."""
    test, val, train = shop.tasks("test"), shop.tasks("val"), shop.tasks("train")
    assert (len(test), len(val), len(train)) == (100, 200, 100)
    ids = [{t.task_id for t in s} for s in (test, val, train)]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert not ({t.instruction for t in val} & {t.instruction for t in test})
    assert [t.task_id for t in val] == [t.task_id for t in shop.goals[100:300]]
    small = WebShopEngine(num_products=200, seed=0, num_test=100, num_val=50)
    assert [t.task_id for t in small.tasks("test")] == [t.task_id for t in test]
    assert [t.task_id for t in small.tasks("val")] == [t.task_id for t in val[:50]]
    with pytest.raises(ValueError, match="^env.num_val: 300 val goals"):
        WebShopEngine(num_products=200, seed=0, num_test=100, num_val=300)
    with pytest.raises(ValueError, match="^env.num_val: must be"):
        WebShopEngine(num_products=200, seed=0, num_test=100, num_val=0)
    assert not {t.task_id for t in test} & {t.task_id for t in train}
    assert [t.task_id for t in test] == [f"webshop-{i}" for i in range(100)]


def test_search_ranking(shop):
    res = shop.search_engine.search("lipstick")
    assert res and all("lipstick" in shop.products[i]["Title"] for i in res)
    task = shop.tasks("test")[0]
    res = shop.search_engine.search(goal_query(task))
    assert shop.by_asin[task.goal["asin"]] in res
    # products carrying more of the query's words rank higher
    q = "paraben free long lasting lipstick"
    top = shop.products[shop.search_engine.search(q)[0]]
    assert "lipstick" in top["Title"] and {"paraben free", "long lasting"} & set(top["Attributes"])
    assert shop.search_engine.search("qwxzzy") == []


def test_page_transitions(shop):
    env = WebShopEnv(shop)
    task = shop.tasks("test")[0]
    obs = env.reset(task)
    assert obs.admissible == ["search[...]"] and obs.text.endswith("search")
    r = env.step(f"search[{goal_query(task)}]")
    assert "click[back to search]" in r.observation.admissible and "click[next >]" in r.observation.admissible
    assert "page 1 (total results:" in r.observation.text
    r = env.step("click[next >]")
    assert "page 2" in r.observation.text and "click[< prev]" in r.observation.admissible
    r = env.step("click[< prev]")
    assert "page 1" in r.observation.text
    asin = task.goal["asin"]
    while f"click[{asin}]" not in r.observation.admissible:
        r = env.step("click[next >]")
    r = env.step(f"click[{asin}]")
    assert "click[buy now]" in r.observation.admissible and "click[description]" in r.observation.admissible
    opt_type, opt_val = next(iter(task.goal["goal_options"].items()))
    r = env.step(f"click[{opt_val}]")
    assert f"{opt_type} ({opt_val}):" in r.observation.text
    r = env.step("click[description]")
    assert r.observation.admissible == ["click[back to search]", "click[< prev]"]
    r = env.step("click[< prev]")
    assert "click[buy now]" in r.observation.admissible
    r = env.step("click[back to search]")
    assert r.observation.admissible == ["search[...]"]


def test_buy_gives_reward_and_ends(shop):
    env = WebShopEnv(shop)
    task = shop.tasks("test")[1]
    env.reset(task)
    env.step(f"search[{goal_query(task)}]")
    r = env.step(f"click[{task.goal['asin']}]")
    if r.info["invalid"]:
        pytest.skip("target not on the first page for this goal")
    for v in task.goal["goal_options"].values():
        env.step(f"click[{v}]")
    r = env.step("click[buy now]")
    assert r.done and r.reward == pytest.approx(1.0) and r.info["success"]
    with pytest.raises(RuntimeError):
        env.step("click[buy now]")


def test_invalid_action_counted_page_unchanged(shop):
    env = WebShopEnv(shop)
    obs = env.reset(shop.tasks("test")[0])
    r = env.step("click[buy now]")
    assert r.info["invalid"] and r.info["invalid_count"] == 1 and r.reward == 0 and not r.done
    assert r.observation.text.startswith("invalid action: click[buy now]")
    assert r.observation.text.endswith(obs.text) and r.observation.admissible == obs.admissible
    r = env.step("gibberish")
    assert r.info["invalid_count"] == 2


def test_max_steps_truncates(shop):
    env = WebShopEnv(shop, max_steps=15)
    env.reset(shop.tasks("test")[0])
    for i in range(15):
        r = env.step("click[nothing]")
    assert r.done and r.reward == 0 and r.info.get("truncated") and r.info["invalid_count"] == 15


def test_agents_success_rates():
    env = make_vec_env("webshop")  # the default catalogue: 500 test goals
    tasks = env.tasks("test")
    oracle = episode_stats(run_episodes(env, tasks, make_agent("oracle", env=env), batch_size=100))
    rand = episode_stats(run_episodes(env, tasks, make_agent("random", seed=1, env=env), batch_size=100))
    noisy = episode_stats(run_episodes(env, tasks, make_agent("noisy_oracle", seed=1, eps=0.3, env=env), batch_size=100))
    assert oracle["success_rate"] >= 0.95
    assert rand["success_rate"] < 0.10
    assert rand["success_rate"] < noisy["success_rate"] < oracle["success_rate"]


def test_near_miss_action_hand_cases():
    wanted, sat = ["red", "large"], (lambda t: t == "item 2")
    results = ["back to search", "next >", "item 1", "item 2"]
    # a wrong product: the first listed one that fails the goal; an option mistake leaves results to the oracle
    assert near_miss_action(results, wanted, set(), "product", None, None, sat) == "click[item 1]"
    assert near_miss_action(results, wanted, set(), "option", "red", None, sat) is None
    assert near_miss_action(["back to search", "item 2"], wanted, set(), "product", None, None, sat) is None
    page = ["back to search", "< prev", "red", "blue", "large", "small", "description", "buy now"]
    # the product page: a product mistake buys as the oracle does; an option mistake swaps, skips, then buys
    assert near_miss_action(page, wanted, set(), "product", None, None, sat) is None
    assert near_miss_action(page, wanted, set(), "option", "red", "blue", sat) == "click[blue]"
    assert near_miss_action(page, wanted, {"blue"}, "option", "red", None, sat) == "click[large]"
    assert near_miss_action(page, wanted, {"blue", "large"}, "option", "red", None, sat) == "click[buy now]"


def test_near_miss_buyer_fails_near_the_boundary():
    env = make_vec_env("webshop", max_steps=10, results_per_page=3, product_ids="index")
    trajs = run_episodes(env, env.tasks("train")[:200], make_agent("near_miss", seed=3, env=env), batch_size=100)
    last = [t.transitions[-1] for t in trajs]
    bought = [s for s in last if s.action == "click[buy now]"]
    assert len(bought) == len(trajs)  # every episode ends in a purchase
    failed = [s for s in bought if not s.info["success"]]
    assert len(failed) >= 0.9 * len(bought)
    # near misses: mostly partial credit (a wrong option, price or attribute), not a wrong product type
    assert sum(s.reward > 0 for s in failed) >= 0.9 * len(failed)
    assert sum(s.info["n_option_match"] < s.info["n_options"] for s in failed) >= 0.3 * len(failed)
    with pytest.raises(KeyError, match="near_miss"):
        make_agent("wizard", env=env)


def test_hasty_buyer_skips_the_last_option_at_its_rate():
    env = make_vec_env("webshop", max_steps=10, results_per_page=3, product_ids="index")
    tasks = env.tasks("train")[:300]
    trajs = run_episodes(env, tasks, make_agent("hasty", seed=2, env=env), batch_size=100)
    two = [t for t in trajs if len(t.task.goal["goal_options"]) >= 2]
    fewer = [t for t in trajs if len(t.task.goal["goal_options"]) < 2]
    assert len(two) >= 100 and fewer
    for t in trajs:  # every episode buys, with the right product and at least one wanted option
        end = t.transitions[-1]
        assert end.action == "click[buy now]" and end.info["r_type"] == 1.0 and end.info["r_price"] == 1.0
    # goals with fewer than two options are bought as the oracle buys them; on the others the purchase misses one
    # option (one of two clicked: partial credit) in about `skip` (0.65) of the episodes
    assert all(t.success for t in fewer)
    hasty = [t for t in two if not t.success]
    assert all(t.transitions[-1].info["n_option_match"] == 1 for t in hasty)
    assert 0.55 <= len(hasty) / len(two) <= 0.75


def test_unknown_env():
    with pytest.raises(KeyError, match="env.name"):
        make_vec_env("nope")


def test_bad_catalogue_size():
    with pytest.raises(ValueError, match="env.num_products"):
        generate_catalogue(0)


def test_real_webshop_file_loader(tmp_path):
    import json

    items = [{"asin": "B0TEST1", "name": "Acme Lipstick", "Title": "Acme Lipstick Long Lasting", "query": "lipstick",
              "category": "beauty", "product_category": "Beauty › Makeup › Lipstick", "pricing": "$12.99",
              "customization_options": {"Color": [{"value": "Red", "image": None}]},
              "BulletPoints": ["long lasting"], "Description": "a lipstick"},
             {"asin": "B0TEST2", "name": "Acme Shampoo", "query": "shampoo", "pricing": ["$5.00"],
              "category": "beauty", "product_category": "Beauty › Hair › Shampoo"}]
    pf = tmp_path / "items.json"
    pf.write_text(json.dumps(items))
    af = tmp_path / "attrs.json"
    af.write_text(json.dumps({"B0TEST1": {"attributes": ["Long Lasting"]}}))
    prods = load_webshop_products(str(pf), str(af))
    assert prods[0]["asin"] == "b0test1" and prods[0]["Price"] == 12.99
    assert prods[0]["options"] == {"color": ["red"]} and prods[0]["Attributes"] == ["long lasting"]
    assert prods[1]["Price"] == 5.0
    bad = tmp_path / "bad.json"
    bad.write_text("[{\"asin\": 1,\n oops")
    from dreamgym_pl.core import DataError

    with pytest.raises(DataError, match="bad.json:2"):
        load_webshop_products(str(bad))
    with pytest.raises(DataError, match="env.products_file"):
        load_webshop_products(str(tmp_path / "missing.json"))


def test_numbered_results_mode(shop):
    env = WebShopEnv(shop, product_ids="index")
    task = shop.tasks("test")[0]
    env.reset(task)
    r = env.step(f"search[{goal_query(task)}]")
    assert "click[item 1]" in r.observation.admissible and "item 1 [SEP]" in r.observation.text
    asin = r.observation.refs["item 1"]
    r = env.step("click[item 1]")
    assert shop.products[shop.by_asin[asin]]["Title"] in r.observation.text
    with pytest.raises(ValueError, match="env.product_ids"):
        WebShopEnv(shop, product_ids="bogus")
    idx_env = make_vec_env("webshop", product_ids="index", num_products=200, num_test=100)
    oracle = episode_stats(run_episodes(idx_env, idx_env.tasks("test"), make_agent("oracle", env=idx_env)))
    assert oracle["success_rate"] >= 0.95


def test_purchase_checklist_hand_computed():
    from dreamgym_pl.envs.webshop.reasoning import purchase_checklist
    from dreamgym_pl.envs.webshop.reward import purchase_reward

    product = {"asin": "b01", "Title": "acme classic coffee table", "name": "acme classic coffee table",
               "BulletPoints": [], "Description": "", "Price": 280.57, "Attributes": ["non slip", "solid wood"],
               "options": {"size": ["large", "small"]}, "query": "coffee table", "product_category": "a › b › c"}
    goal = {"query": "coffee table", "name": "vexo plus coffee table", "attributes": ["non slip", "mid century"],
            "goal_options": {"color": "white", "size": "small"}, "price_upper": 290.0,
            "product_category": "a › b › c"}
    info = purchase_reward(product, ["small"], goal)
    # met: non slip, size small, price = 3 of 5 (2 attributes + 2 options + price); type matches
    assert info["reward"] == pytest.approx(0.6)
    text = purchase_checklist(goal, product, {"size": "small"}, info, info["reward"])
    assert text == ("buying ends the episode . type coffee table yes . non slip yes . mid century no . "
                    "color white no color option . size small yes . price under 290.00 yes . "
                    "so 3 of 5 are met and the reward is 0.60")
    text = purchase_checklist(goal, product, {}, purchase_reward(product, [], goal), 0.4)
    assert "size small not chosen" in text and "so 2 of 5 are met and the reward is 0.40" in text
    # env.trace=evidence: what the item page shows precedes each verdict it decides (no evidence for attributes
    # or for an option the product lacks)
    text = purchase_checklist(goal, product, {"size": "small"}, info, info["reward"], trace="evidence")
    assert text == ("buying ends the episode . type coffee table : page acme classic coffee table : yes . "
                    "non slip yes . mid century no . color white no color option . "
                    "size small : page size (small) : yes . price under 290.00 : page $280.57 : yes . "
                    "so 3 of 5 are met and the reward is 0.60")
    text = purchase_checklist(goal, product, {}, purchase_reward(product, [], goal), 0.4, trace="evidence")
    assert "size small : page size : not chosen ." in text
    # env.trace=tally: the evidence checks, then the failed ones named, the count and the type factor
    text = purchase_checklist(goal, product, {"size": "small"}, info, info["reward"], trace="tally")
    assert text.endswith("size small : page size (small) : yes . price under 290.00 : page $280.57 : yes . "
                         "failed : mid century , color white . so 3 of 5 are met , type factor 1.0 , "
                         "and the reward is 0.60")
    wrong = dict(info, r_type=0.5)
    text = purchase_checklist(goal, product, {"size": "small"}, wrong, 0.3, trace="tally")
    assert "type coffee table : page acme classic coffee table : no" in text
    assert text.endswith("failed : type , mid century , color white . so 3 of 5 are met , type factor 0.5 , "
                         "and the reward is 0.30")
    perfect = dict(goal, attributes=["non slip"], goal_options={"size": "small"})
    full = purchase_reward(product, ["small"], perfect)
    assert full["reward"] == pytest.approx(1.0)
    text = purchase_checklist(perfect, product, {"size": "small"}, full, full["reward"], trace="tally")
    assert text.endswith("price under 290.00 : page $280.57 : yes . nothing failed so the reward is 1.00")


def test_trace_option_reaches_explain_and_is_validated(shop):
    from dreamgym_pl.envs.webshop.vec import WebShopVecEnv

    with pytest.raises(ValueError, match="env.trace"):
        WebShopVecEnv(shop, trace="bogus")
    venv = WebShopVecEnv(shop, trace="evidence")
    task = shop.tasks("train")[0]
    agent = make_agent("oracle", env=venv)
    traj = run_episodes(venv, [task], agent)[0]
    buy = traj.transitions[-1]
    assert buy.action == "click[buy now]"
    title = shop.products[shop.by_asin[buy.info["asin"]]]["Title"]
    assert f": page {title} : yes" in venv.explain(buy)
    assert ": page" not in WebShopVecEnv(shop).explain(buy)


def test_config_rule_of_env_trace_lists_the_trace_forms():
    """Shared code may not import WebShop (test_layout), so env.trace's rule spells the forms out: the same ones."""
    from dreamgym_pl.config_keys import RULES
    from dreamgym_pl.envs.webshop.reasoning import TRACES

    rule = RULES["env.trace"]
    assert all(rule.ok(t) for t in TRACES) and not rule.ok("steps")
    assert rule.allowed == f"one of {list(TRACES)}"  # the same forms, no more
