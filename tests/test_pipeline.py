"""End-to-end pipeline runs at the smallest scale (the default suite keeps one; the rest are `slow`)."""

import json

import pytest

from dreamgym_pl.core import Transition, read_jsonl
from dreamgym_pl.outcomes import read_outcomes
from dreamgym_pl.pipeline import run_pipeline
from dreamgym_pl.provenance import read_records
from tests.conftest import compose

TINY = ["sft.max_steps=5", "sft.warmup_steps=1", "model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=64",
        "env.num_products=100", "env.num_test=50", "env.num_val=20", "collect.agents.oracle=30", "collect.agents.noisy_oracle=20",
        "collect.agents.random=10", "++collect.agents.hasty=30", "sft.num_trajectories=10", "sft.epochs=1", "eval.num_goals=8", "eval.val_goals=4",
        "eval.batch_size=8", "rl.real_budget=60", "rl.tasks_per_iter=4", "algo.group_size=2",
        "algo.mini_batch_size=16", "algo.max_new_tokens=8", "trainer.enable_progress_bar=false",
        "sft.copy_steps=2", "sft.copy_examples=3", "sft.copy_length=8"]


def test_collect_and_oracle_eval(tmp_path):
    cfg = compose(["stages=[collect,eval]", "eval.agent=oracle", "env.num_products=100", "env.num_test=50", "env.num_val=20",
                   "collect.agents.oracle=20", "collect.agents.noisy_oracle=10", "collect.agents.random=10"])
    m = run_pipeline(cfg, tmp_path)
    assert m["eval/success_rate"] >= 0.95
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["eval/success_rate"] == m["eval/success_rate"]
    trs = read_jsonl(tmp_path / "offline" / "transitions.jsonl", Transition)
    assert len(trs) == m["collect/real_transitions"] == m["budget/real_transitions"]
    assert {t.source for t in trs} == {"oracle", "noisy_oracle", "random"}
    assert all(t.task.task_id.startswith("webshop-") and t.next_state.text for t in trs)
    assert json.loads((tmp_path / "stages.json").read_text())["completed"] == ["collect", "eval"]
    outcomes = read_outcomes(tmp_path / "eval" / "test_outcomes.jsonl")  # per goal, for paired comparisons
    assert len(outcomes) == m["eval/num_goals"] and sum(outcomes.values()) / len(outcomes) == m["eval/success_rate"]


def test_grpo_pipeline_tiny(tmp_path):
    """collect -> sft -> GRPO (real env) -> eval, and a resume that skips every completed stage."""
    cfg = compose(["conf=webshop_grpo", *TINY])
    m = run_pipeline(cfg, tmp_path)
    for key in ("sft/test_success_rate", "rl/test_success_rate", "eval/success_rate", "rl/real_transitions"):
        assert key in m
    for stage in ("sft", "rl", "eval"):  # validation next to test: what sweeps and defaults read
        assert 0.0 <= m[f"{stage}/val_success_rate"] <= 1.0 and m[f"{stage}/val_num_goals"] == 4
        assert m[f"{stage}/val_mean_score"] >= m[f"{stage}/val_success_rate"]
    assert m["rl/real_transitions"] >= 60
    assert m["sft/copy_loss"] > 0 and (tmp_path / "checkpoints" / "sft" / "copy_start.json").exists()  # warm start
    assert m["sft/copy_examples"] == 3  # mixed into the demonstrations (not counted in sft/samples)
    assert m["budget/real_transitions"] == m["collect/real_transitions"] + m.get("experience/real_transitions", 0) \
        + m["rl/real_transitions"]
    assert (tmp_path / "checkpoints" / "rl" / "model.safetensors").exists()
    outcomes = read_outcomes(tmp_path / "eval" / "test_outcomes.jsonl")
    assert len(outcomes) == 8 and sum(outcomes.values()) / 8 == m["eval/success_rate"]
    val_outcomes = read_outcomes(tmp_path / "eval" / "val_outcomes.jsonl")  # paired comparisons on val
    assert len(val_outcomes) == 4 and sum(val_outcomes.values()) / 4 == m["eval/val_success_rate"]
    assert (tmp_path / "plots" / "rl_rollouts.png").exists()
    assert list((tmp_path / "tb" / "rl").glob("events.out.tfevents.*"))
    cfg2 = compose(["conf=webshop_grpo", "resume=true", *TINY])
    m2 = run_pipeline(cfg2, tmp_path)
    assert m2["budget/real_transitions"] == m["budget/real_transitions"]  # nothing counted twice
    recs = read_records(tmp_path)  # one environment record per invocation (the resume added the second)
    assert len(recs) == 2 and all(r["packages"]["torch"] and r["torch_threads"] >= 1 for r in recs)


EXP = ["experience.onpolicy_episodes=4", "experience.max_transitions=150", "experience.max_steps=5", "experience.warmup_steps=1", "experience.judge_steps=12", "experience.max_new_tokens=40",
       "synthetic_rl.synthetic_budget=40", "synthetic_rl.tasks_per_iter=4", "s2r.real_budget=30", "s2r.tasks_per_iter=4",
       "curriculum.train_examples=20", "curriculum.max_words=12", "experience.outcome_steps=2",
       "experience.outcome_batch_size=4"]


def test_s2r_pipeline_tiny(tmp_path):
    """The main preset end to end: collect -> sft -> experience -> synthetic_rl (+curriculum) -> s2r -> eval."""
    m = run_pipeline(compose(["conf=webshop_s2r", *TINY, *EXP, "curriculum.lambda_=0.5", "curriculum.min_variance=0.01",
                              "experience.outcome_agents={near_miss:20}"]),
                     tmp_path)
    assert m["synthetic_rl/real_transitions"] == 0 and m["synthetic_rl/synthetic_transitions"] >= 40
    assert m["budget/synthetic_transitions"] == m["synthetic_rl/synthetic_transitions"]
    # the experience model's demonstrations: offline rows only at the defaults (replay.synthetic_demos off; no real
    # transitions are added before synthetic RL ends), counted as shown
    assert m["replay/reads_offline"] > 0 and m["replay/reads_online"] == 0 and m["replay/reads_synthetic"] == 0
    assert m["synthetic_rl/transitions_per_s"] > 0 and m["s2r/transitions_per_s"] > 0  # rollout throughput
    assert 0 < m["s2r/real_transitions"] <= 30  # s2r.budget_cap: never past s2r.real_budget
    assert m["budget/real_transitions"] == m["collect/real_transitions"] + m["experience/real_transitions"] \
        + m["experience/outcome_real_transitions"] + m["s2r/real_transitions"]  # on-policy check, outcome episodes
    assert 0.0 <= m["experience/onpolicy_reward_agreement"] <= 1.0 and m["experience/onpolicy_steps"] > 0
    for k in ("experience/reward_agreement", "sft/test_success_rate", "synthetic_rl/test_success_rate",
              "s2r/test_success_rate", "eval/success_rate", "curriculum/synthetic_share"):
        assert k in m
    assert m["curriculum/max_share"] <= 0.5
    # the outcome model: trained on the offline endings and 20 near-miss episodes of its own, saved, judged
    assert m["experience/outcome_real_resets"] == 20 and m["experience/outcome_steps"] == 2
    assert len((tmp_path / "offline" / "outcome_transitions.jsonl").read_text().splitlines()) == \
        m["experience/outcome_real_transitions"]
    assert m["experience/outcome_example_successes"] < m["experience/outcome_examples"]
    saved = json.loads((tmp_path / "checkpoints" / "outcome" / "outcome.json").read_text())["metrics"]
    for k in ("experience/outcome_real_transitions", "experience/outcome_real_resets"):  # a copied model counts them
        assert saved[k] == m[k]
    assert m["experience/outcome_heldout_n"] > 0 and 0.0 <= m["experience/outcome_heldout_accuracy"] <= 1.0
    assert not any("onpolicy_onpolicy" in k for k in m)  # the on-policy outcome verdicts: experience/onpolicy_outcome_*
    hist = json.loads((tmp_path / "history" / "synthetic_rl.json").read_text())  # every iteration's GRPO-signal share
    assert hist and all(0.0 <= r["rollout/mixed_groups_share"] <= 1.0 for r in hist)
    assert 0.0 <= m["experience/targets_over_max_new_tokens"] <= 1.0 and m["experience/target_max_tokens"] > 10
    assert (tmp_path / "replay" / "CURRENT").exists() and (tmp_path / "curriculum" / "state.json").exists()
    # the stage's task-generation totals are the saved curriculum's counts
    st = json.loads((tmp_path / "curriculum" / "state.json").read_text())
    assert m["curriculum/generation_attempts"] == st["attempts"] and st["accepted"] == len(
        (tmp_path / "curriculum" / "generated_tasks.jsonl").read_text().splitlines())
    assert all(0.0 <= m[f"curriculum/generation_{k}_share"] <= 1.0 for k in ("valid", "new", "rejected"))


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["webshop_ppo", "webshop_dpo", "webshop_dreamgym"])
def test_other_presets_tiny(tmp_path, preset):
    m = run_pipeline(compose([f"conf={preset}", *TINY, *EXP]), tmp_path)
    assert "eval/success_rate" in m


def test_tiny_tokenizer_covers_the_experience_format(tmp_path):
    """Words of targets must be in the vocabulary: an <unk> is dropped on decode and breaks parsing."""
    from dreamgym_pl.experience.format import ExperienceFormat, build_target
    from dreamgym_pl.stages import Run

    run = Run(compose(["env=webshop_tiny", "env.num_products=100", "env.num_test=50", "env.num_val=20", *TINY[:6]]), tmp_path)
    _, tok = run.load_policy()
    from dreamgym_pl.core import Observation

    target = build_target(Observation("search", ["search[...]", "click[item 1]"]), 0.5, False,
                          "searching for red tea lists the best matching products ranked by relevance", ExperienceFormat())
    ids = tok(target, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids
