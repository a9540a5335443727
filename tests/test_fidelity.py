"""Fidelity measurement and leakage-free retrieval: hand-computed scores, end causes, the bootstrap gap,
task exclusion in the replay buffer and in the synthetic env, the split by task, the `stay` rule."""

import pytest

from dreamgym_pl.core import Observation, StepResult, Task, Trajectory, Transition
from dreamgym_pl.experience.fidelity import bootstrap_gap, end_cause, episode_report, score_open_loop
from dreamgym_pl.experience.format import INVALID_STATE, ExperienceFormat, ParsedStep
from dreamgym_pl.experience.module import demos_for, split_by_task
from dreamgym_pl.replay.buffer import ReplayBuffer
from dreamgym_pl.replay.embed import HashingEmbedder


def tr(task, state, action, nxt, reward=0.0, done=False, **info):
    t = Task(task, f"buy {task}")
    return Transition(t, 0, Observation(state, ["click[a]", "click[b]"]), action, Observation(nxt, ["click[c]"]),
                      reward, done, info=info)


def traj(*transitions):
    return Trajectory(task=transitions[0].task, transitions=list(transitions))


def test_a_task_never_retrieves_its_own_transitions():
    buf = ReplayBuffer(HashingEmbedder(64), capacity=8)
    same = [tr("lamp", "results page", "click[a]", f"item page {i}", episode=f"oracle-{i}") for i in range(5)]
    other = tr("desk", "results page x", "click[a]", "desk page", episode="oracle-9")
    buf.add(same + [other], "offline")
    query = tr("lamp", "results page", "click[a]", "?", episode="policy-0")
    assert {d.task.task_id for d in demos_for(buf, query, ExperienceFormat(k=3, exclude="task"))} == {"desk"}
    # the old rule (own episode only) shows the same task's transitions: the answer is in the prompt
    assert "lamp" in {d.task.task_id for d in demos_for(buf, query, ExperienceFormat(k=3, exclude="episode"))}
    assert buf.query(["results page"], 3, exclude_tasks=["desk"])[0][0].task.task_id == "lamp"


def test_split_by_task_holds_out_whole_tasks():
    trajs = [traj(tr(f"t{i % 10}", "s", "click[a]", "n")) for i in range(40)]
    train, held = split_by_task(trajs, 0.2, seed=0)
    held_tasks = {t.task.task_id for t in held}
    assert len(held_tasks) == 2 and len(held) == 8 and len(train) == 32
    assert not held_tasks & {t.task.task_id for t in train}


def test_end_causes_and_report():
    ok = traj(tr("a", "s", "click[buy]", "thanks", 1.0, True, success=True))
    cut = traj(tr("a", "s", "click[x]", "s", 0.0, True, truncated=True))
    bad = traj(tr("a", "s", "click[x]", INVALID_STATE, 0.0, True, invalid=True, synthetic=True))
    junk = traj(tr("a", "s", "click[x]", "fail", 0.0, True, invalid_output=True, synthetic=True))
    assert [end_cause(t, 10) for t in (ok, cut, bad, junk)] == ["done", "step_limit", "invalid", "unparseable"]
    r = episode_report([ok, cut, bad, junk], 10, [1.0, 0.0, 0.0, 0.0])
    assert r["success"] == 0.25 and r["end_done"] == 0.25 and r["mean_return"] == 0.25
    assert r["invalid_actions_per_step"] == 0.25


def test_bootstrap_gap_is_the_mean_difference():
    real = {"a": [1.0, 0.0], "b": [0.0, 0.0]}
    syn = {"a": [1.0, 1.0], "b": [1.0, 0.0]}
    gap, lo, hi = bootstrap_gap(real, syn, n_boot=500)
    assert gap == pytest.approx(0.75 - 0.25)
    assert lo <= gap <= hi
    assert bootstrap_gap(real, real)[0] == 0.0


def test_open_loop_scores_hand_computed():
    refs = [tr("a", "s", "click[a]", "p", 0.0, False), tr("a", "p", "click[c]", "done", 1.0, True, success=True)]
    parsed = [ParsedStep(Observation("p", ["click[c]"]), 0.0, False),
              ParsedStep(Observation("done", []), 0.0, True)]  # says done but with reward 0: a missed success
    r = score_open_loop(parsed, refs, ["click[c]", None])
    assert r["open_loop/reward_agreement"] == 0.5 and r["open_loop/done_agreement"] == 1.0
    assert r["open_loop/terminal_recall"] == 0.0 and r["open_loop/terminal_f1"] == 0.0
    assert r["open_loop/action_recall"] == 1.0 and r["open_loop/state_f1"] == 1.0


def test_action_recall_valid_ignores_actions_the_real_env_refused():
    refs = [tr("a", "s", "click[a]", "p", 0.0, False), tr("a", "p", "click[x]", "p", 0.0, False),
            tr("a", "p", "click[c]", "q", 0.0, False)]
    parsed = [ParsedStep(Observation("p", ["click[c]"]), 0.0, False),   # next action x: refused by the real env too
              ParsedStep(Observation("p", ["click[d]"]), 0.0, False),   # next action c: accepted, not listed
              ParsedStep(Observation("q", ["click[e]"]), 0.0, False)]
    r = score_open_loop(parsed, refs, ["click[x]", "click[c]", None], next_valid=[False, True, False])
    assert r["open_loop/action_recall"] == 0.0  # both next actions missing from the predicted lists
    assert r["open_loop/action_recall_valid"] == 0.0  # the one accepted action (c) was missed
    parsed[1] = ParsedStep(Observation("p", ["click[c]"]), 0.0, False)
    r = score_open_loop(parsed, refs, ["click[x]", "click[c]", None], next_valid=[False, True, False])
    assert r["open_loop/action_recall"] == 0.5 and r["open_loop/action_recall_valid"] == 1.0


def test_verdict_counts_hand_computed():
    from dreamgym_pl.experience.judge import verdict_counts

    def said(reward, valid=True):
        return ParsedStep(Observation("thanks", []), reward, True, "", valid)

    # real: failed 0.0, failed 0.5, success 1.0, success 1.0; the last prediction is unparseable
    parsed = [said(1.0), said(0.5), said(1.0), said(1.0, valid=False)]
    r = verdict_counts(parsed, [0.0, 0.5, 1.0, 1.0])
    assert (r["failed"], r["successful"]) == (2.0, 2.0)
    assert r["failed_judged_success"] == 1.0 and r["successful_judged_success"] == 1.0
    assert r["reward_agrees"] == 2.0 and r["accuracy"] == 0.5  # right: the 0.5 failure and the first success


def test_predict_last_steps_prompts_each_ending_step_with_its_real_history():
    from dreamgym_pl.experience.judge import predict_last_steps
    from dreamgym_pl.rollout.sampling import Completion

    seen = []

    class Echo:
        def generate(self, prompts, params):
            seen.extend(prompts)
            assert params.temperature == 0.0
            return [Completion("<next_state> thanks </next_state> <actions> </actions> <reward> 1.00 </reward> "
                               "<done> true </done>", [], []) for _ in prompts]

    a = traj(tr("lamp", "search page", "search[lamp]", "results"), tr("lamp", "results", "click[buy]", "thanks", 1.0, True))
    b = traj(tr("desk", "desk page", "click[buy]", "thanks", 0.0, True))
    preds = predict_last_steps(Echo(), [a, b], lambda t: [], ExperienceFormat(reasoning=False), 64)
    assert len(seen) == 2 and [p.reward for p in preds] == [1.0, 1.0] and all(p.valid for p in preds)
    assert "did : search[lamp]" in seen[0] and seen[0].rstrip().endswith("action : click[buy] \npredict :")
    assert "did :" not in seen[1] and "task : buy desk" in seen[1]
    assert predict_last_steps(Echo(), [], lambda t: [], ExperienceFormat(), 64) == []


def test_synthetic_env_stay_rule_keeps_the_state():
    from dreamgym_pl.experience.synthetic_env import SyntheticEnv
    from dreamgym_pl.rollout.sampling import SamplingParams

    class NoEngine:
        def generate(self, prompts, params):
            raise AssertionError("an invalid action needs no generation")

    start = Observation("page", ["click[a]"])
    note = lambda obs, a: Observation(f"invalid action: {a} | {obs.text}", obs.admissible)  # noqa: E731
    env = SyntheticEnv(NoEngine(), None, ExperienceFormat(), lambda t: start, lambda s: [],
                       lambda a, o: a in o.admissible, SamplingParams(), max_steps=2, invalid_action="stay",
                       invalid_observation=note)
    env.reset([Task("t", "x")])
    r = env.step(["click[z]"])[0]
    assert isinstance(r, StepResult) and not r.done and r.reward == 0.0 and r.info["invalid"]
    assert r.observation.text == "invalid action: click[z] | page" and r.observation.admissible == ["click[a]"]
    r = env.step(["click[z]"])[0]
    assert r.done and r.info["truncated"]  # the step limit still ends it


def test_bench_fidelity_runs_on_a_tiny_run(tmp_path, monkeypatch, capsys):
    """experiments/bench_fidelity.py end to end on a tiny collect -> sft -> experience run: the flat keys exist."""
    import json
    import runpy
    import sys

    from dreamgym_pl.pipeline import run_pipeline
    from tests.conftest import ROOT, compose
    from tests.test_pipeline import EXP, TINY

    run_pipeline(compose(["conf=webshop_dreamgym", "stages=[collect,sft,experience]", *TINY, *EXP]), tmp_path)
    out = tmp_path / "fid.json"
    monkeypatch.setattr(sys, "argv", ["bench_fidelity.py", "--run-dir", str(tmp_path), "--tasks", "2",
                                      "--rollouts-per-task", "2", "--open-loop-steps", "6", "--out", str(out),
                                      "experience.invalid_action=stay"])
    runpy.run_path(str(ROOT / "experiments" / "bench_fidelity.py"), run_name="__main__")
    r = json.loads(out.read_text())
    for k in ("closed_loop/real_success", "closed_loop/synthetic_success", "closed_loop/success_gap",
              "closed_loop/end_step_limit_synthetic", "open_loop/reward_agreement", "open_loop/terminal_f1",
              "open_loop/action_recall", "open_loop/action_recall_valid", "open_loop/state_f1"):
        assert k in r, k
    assert r["closed_loop/episodes"] == 4 and r["args"]["overrides"] == ["experience.invalid_action=stay"]
    assert "success gap (synthetic - real)" in capsys.readouterr().out
