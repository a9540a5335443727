"""experiments/diagnostics/webshop_decision_margins.py: its pure parts against hand values, and the recorder on the
oracle."""

import math
import runpy
from pathlib import Path

import pytest

from dreamgym_pl.envs.base import make_vec_env
from dreamgym_pl.envs.webshop.reward import goal_option_values
from dreamgym_pl.rollout.collector import run_episodes
from dreamgym_pl.rollout.prompts import PromptConfig

M = runpy.run_path(str(Path(__file__).resolve().parents[1] / "experiments" / "diagnostics"
                       / "webshop_decision_margins.py"))


def test_pair_prob_and_kind_hand_values():
    assert M["pair_prob"](math.log(0.3), math.log(0.1)) == pytest.approx(0.75)
    assert M["pair_prob"](-1000.0, -1000.0 + math.log(3)) == pytest.approx(0.25)  # stable far from 0
    assert M["action_kind"]("click[buy now]", "click[red]") == "buy"
    assert M["action_kind"]("click[red]", "click[red]") == "continue"
    assert M["action_kind"]("click[< prev]", "click[red]") == "other"


def test_summary_hand_values():
    rows = [{"kind": "buy", "p_buy_pair": 0.9, "logp_cont": math.log(0.05)},
            {"kind": "buy", "p_buy_pair": 0.6, "logp_cont": math.log(0.3)},
            {"kind": "continue", "p_buy_pair": 0.2, "logp_cont": math.log(0.7)},
            {"kind": "other", "p_buy_pair": 0.5, "logp_cont": math.log(0.2)}]
    s = M["summary"](rows)
    assert s["decisions"] == 4 and s["greedy_buy"] == 0.5 and s["greedy_continue"] == 0.25 and s["greedy_other"] == 0.25
    assert s["p_buy_pair_mean"] == pytest.approx(0.55) and s["p_buy_pair_median"] == 0.6  # sorted: .2 .5 .6 .9
    assert s["near_tie_share"] == 0.5 and s["p_continue_mean"] == pytest.approx(0.3125)


def test_recorder_finds_the_decision_on_multi_option_goals_only():
    env = make_vec_env("webshop", num_products=200, num_test=60, num_val=10, seed=0)
    tasks = env.tasks("test")
    rec = M["DecisionRecorder"](env.scripted_agent("oracle"), PromptConfig())
    trajs = run_episodes(env, tasks, rec, batch_size=16)
    multi = {t.task_id for t in tasks if len(goal_option_values(t.goal)) >= 2}
    assert rec.records and {r["task_id"] for r in rec.records} <= multi
    assert len({r["task_id"] for r in rec.records}) == len(rec.records)  # once an episode
    by_id = {t.task.task_id: t for t in trajs}
    for r in rec.records:
        acts = [tr.action for tr in by_id[r["task_id"]].transitions]
        assert r["continue"] in acts and acts[-1] == "click[buy now]"  # the oracle clicked it, then bought
        assert r["continue"][len("click["):-1] in goal_option_values(by_id[r["task_id"]].task.goal)


def test_sequence_logp_is_the_sum_of_next_token_logprobs(tmp_path):
    """Checked against one forward pass a token on a tiny checkpoint; no end-of-sequence token is scored."""
    import torch

    from dreamgym_pl.models import load_pretrained
    from tests.conftest import save_tiny_checkpoint

    model, tok = load_pretrained(save_tiny_checkpoint(tmp_path / "m"))
    prompt, action = "task : find a red shirt \n action :", "click[buy now]"
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    a = tok(action, add_special_tokens=False)["input_ids"]
    want = 0.0
    with torch.no_grad():
        for j, t in enumerate(a):
            logits = model(input_ids=torch.tensor([p + a[:j]])).logits[0, -1]
            want += float(torch.log_softmax(logits.float(), -1)[t])
    assert M["sequence_logp"](model, tok, prompt, action, 1024) == pytest.approx(want, abs=1e-4)


def test_demo_decisions_count_the_hasty_habit():
    from dreamgym_pl.envs.webshop.agents import HastyBuyer, WebShopOracle

    env = make_vec_env("webshop", num_products=200, num_test=60, num_val=10, seed=0)
    tasks = env.tasks("test")
    catalogue = {p["asin"]: p for p in env.engine.products}
    always = M["demo_decisions"](run_episodes(env, tasks, HastyBuyer(skip=1.0, catalogue=catalogue), batch_size=16))
    never = M["demo_decisions"](run_episodes(env, tasks, HastyBuyer(skip=0.0, catalogue=catalogue), batch_size=16))
    oracle = M["demo_decisions"](run_episodes(env, tasks, WebShopOracle(catalogue=catalogue), batch_size=16))
    assert always["buy"] > 0 and always["continue"] == 0  # every decision bought
    assert never == oracle and never["buy"] == 0 and never["continue"] == always["buy"]  # the same decisions
    assert never["final_buys"] > always["final_buys"]  # each continued episode ends with every option chosen
