import pytest
from hypothesis import given, settings, strategies as st

from dreamgym_pl.core import Observation, Task, Transition
from dreamgym_pl.envs import make_vec_env
from dreamgym_pl.envs.webshop.reasoning import webshop_reasoning
from dreamgym_pl.experience.format import (INVALID_STATE, STOP, ExperienceFormat, build_prompt, build_target, parse_output,
                                         target_length_report)
from dreamgym_pl.experience.judge import score_steps, set_f1, token_f1
from dreamgym_pl.experience.synthetic_env import SyntheticEnv
from dreamgym_pl.replay.buffer import ReplayBuffer
from dreamgym_pl.replay.embed import HashingEmbedder
from dreamgym_pl.rollout.sampling import Completion, SamplingParams

FMT = ExperienceFormat()
NEXT = Observation("back to search [SEP] page 1 [SEP] b01234 [SEP] acme lipstick", ["click[back to search]", "click[b01234]"])
VALID = build_target(NEXT, 0.5, False, "searching lists products", FMT)


def test_round_trip_target():
    p = parse_output(VALID)
    assert p.valid and p.observation == NEXT and p.reward == 0.5 and not p.done and p.reasoning == "searching lists products"


def test_detokenised_spacing_is_tolerated():
    spaced = ("< reasoning > x < / reasoning > < next_state > page [SEP] b 0 1 2 3 4 < / next_state > "
              "< actions > click [ b 0 1 2 3 4 ] | click [ next > ] < / actions > < reward > 1 . 00 < / reward > "
              "< done > true < / done >")
    p = parse_output(spaced)
    assert p.valid and p.reward == 1.0 and p.done
    assert p.observation.admissible == ["click[b 0 1 2 3 4]", "click[next >]"]


@pytest.mark.parametrize("broken,err", [
    (VALID.replace("<reward> 0.50 </reward>", ""), "reward"),
    (VALID.replace("0.50", "lots"), "reward"),
    (VALID.replace("false", "maybe"), "done"),
    (VALID.split("<next_state>")[0], "next_state"),
    ("", "next_state"),
])
def test_broken_outputs_become_invalid_transitions(broken, err):
    p = parse_output(broken)
    assert not p.valid and err in p.errors
    assert p.observation.text == INVALID_STATE and p.reward == 0.0 and p.done


def test_reward_clamped():
    assert parse_output(VALID.replace("0.50", "7")).reward == 1.0
    assert not parse_output(VALID.replace("0.50", "nan")).valid


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parser_never_raises_on_arbitrary_text(s):
    p = parse_output(s)
    assert isinstance(p.valid, bool) and 0.0 <= p.reward <= 1.0


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(VALID)), st.integers(0, len(VALID)), st.text(max_size=20))
def test_parser_never_raises_on_mutated_outputs(i, j, junk):
    i, j = min(i, j), max(i, j)
    p = parse_output(VALID[:i] + junk + VALID[j:])
    assert p.valid or p.done


def test_prompt_contains_parts_and_ablations():
    demo = Transition(Task("d", "buy tea"), 0, Observation("search", ["search[...]"]), "search[tea]", NEXT, 0.0, False)
    pr = build_prompt("buy lipstick", [("search", "search[lipstick]")], [demo], NEXT, "click[b01234]", FMT)
    assert "task : buy lipstick" in pr and "example :" in pr and "did : search[lipstick]" in pr and "action : click[b01234]" in pr
    no = build_prompt("buy lipstick", [("search", "search[lipstick]")], [demo], NEXT, "click[b01234]",
                      ExperienceFormat(history=0, k=0, reasoning=False))
    assert "example :" not in no and "did :" not in no
    assert "<reasoning>" not in build_target(NEXT, 0.0, False, "r", ExperienceFormat(reasoning=False))
    # the task sits between the state and the action it judges, after the demonstrations and the history
    order = [pr.index(x) for x in ("example :", "did :", "\nstate :", "task : buy lipstick", "\naction : click[b01234]")]
    assert order == sorted(order) and pr.rstrip().endswith("predict :")


def test_terminal_steps_repeat_in_training_samples():
    from dreamgym_pl.core import Trajectory
    from dreamgym_pl.experience.module import experience_samples
    from dreamgym_pl.models import train_word_tokenizer

    steps = [Transition(Task("t", "buy tea"), i, NEXT, "click[x]", NEXT, float(i == 2), i == 2) for i in range(3)]
    tok = train_word_tokenizer(["buy tea click x predict state task action reward done"])
    one = experience_samples([Trajectory(steps[0].task, steps)], tok, FMT, None)
    three = experience_samples([Trajectory(steps[0].task, steps)], tok, FMT, None, terminal_repeat=3)
    assert len(one) == 3 and len(three) == 5  # the last (done) step 3 times, the others once
    assert all(s.prompt_ids == three[-1].prompt_ids for s in three[-3:])


def test_webshop_reasoning():
    buy = Transition(Task("t", "x"), 3, NEXT, "click[buy now]", Observation("thank you"), 0.75, True,
                     info={"n_attr_match": 1, "n_attrs": 2, "n_option_match": 1, "n_options": 1, "r_price": 1.0,
                           "r_type": 1.0})
    r = webshop_reasoning(buy)
    assert "1 of 2 attributes" in r and "1 of 1 options" in r and "within" in r and "0.75" in r
    inv = Transition(Task("t", "x"), 0, NEXT, "click[zzz]", NEXT, 0.0, False, info={"invalid": True})
    assert "not available" in webshop_reasoning(inv)
    s = Transition(Task("t", "x"), 0, Observation("search"), "search[red tea]", NEXT, 0.0, False, info={})
    assert "red tea" in webshop_reasoning(s)


def test_judge_scores_hand_computed():
    assert token_f1("a b c", "a b d") == pytest.approx(2 / 3)
    assert set_f1(["click[a]", "click[b]"], ["click[ a ]"]) == pytest.approx(2 / 3)
    ref = [Transition(Task("t", "x"), 0, NEXT, "a", NEXT, 1.0, True), Transition(Task("t", "x"), 0, NEXT, "a", NEXT, 0.0, False)]
    parsed = [parse_output(build_target(NEXT, 1.0, True, "", FMT)), parse_output("garbage")]
    s = score_steps(parsed, ref)
    assert s["experience/reward_agreement"] == 0.5 and s["experience/done_agreement"] == 0.5
    assert s["experience/invalid_output_rate"] == 0.5 and s["experience/terminal_reward_agreement"] == 1.0


class ScriptedEngine:
    """A deterministic GenerationEngine for unit tests: answers every prompt with the next canned output."""

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.prompts = []

    def generate(self, prompts, params):
        self.prompts += prompts
        return [Completion(self.outputs.pop(0), [], []) for _ in prompts]

    def load_weights(self, model):
        pass


def test_synthetic_env_steps_enriches_and_counts_invalid():
    buf = ReplayBuffer(HashingEmbedder(64), capacity=8)
    demo = Transition(Task("d", "buy tea"), 0, Observation("search", ["search[...]"]), "search[tea]", NEXT, 0.0, False)
    buf.add([demo], "offline")
    done_out = build_target(Observation("thank you", []), 1.0, True, "bought", FMT)
    eng = ScriptedEngine([VALID, "nonsense", done_out])
    shop = make_vec_env("webshop", num_products=50, num_test=10, num_val=10)
    env = SyntheticEnv(eng, buf, FMT, lambda t: Observation("search", ["search[...]"]), lambda s: [], shop.is_admissible,
                       SamplingParams(temperature=0.7, max_new_tokens=160, stop=list(STOP)), max_steps=5)
    obs = env.reset([Task("a", "buy lipstick"), Task("b", "buy shoes")])
    assert obs[0].admissible == ["search[...]"]
    r = env.step(["search[lipstick]", "search[shoes]"])
    assert r[0].observation == NEXT and not r[0].done
    assert r[1].done and r[1].info["invalid_output"] and env.stats["invalid_outputs"] == 1
    assert "example : state : search action : search[tea]" in eng.prompts[0]  # retrieval reached the prompt
    r = env.step(["click[b01234]", None])
    assert r[1] is None and r[0].done and r[0].reward == 1.0 and r[0].info["success"]
    assert buf.count("synthetic") == 2  # valid synthetic transitions enrich the buffer
    env.reset([Task("c", "buy x")])
    r = env.step(["click[nothing]"])  # not offered by the state: failure state, no generation
    assert r[0].done and r[0].reward == 0.0 and r[0].info["invalid"] and len(eng.prompts) == 3


def test_target_length_report_hand_computed():
    lengths = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200]
    r = target_length_report(lengths, 150)
    assert r["over_share"] == 5 / 20 and r["max_len"] == 200.0
    assert r["p95_len"] == 190.0  # nearest rank: ceil(0.95 * 20) = 19th smallest
    assert target_length_report([5, 7], 7) == {"over_share": 0.0, "max_len": 7.0, "p95_len": 7.0}
    assert target_length_report([], 7)["over_share"] == 0.0


def test_target_cut_before_reward_is_invalid():
    """Why over_share is a floor on the invalid-output rate: a generation cut by max_new_tokens loses its tags."""
    cut = VALID[: VALID.index("<reward>")]
    p = parse_output(cut)
    assert not p.valid and "reward" in p.errors and "done" in p.errors


def test_experience_model_takes_the_policy_size():
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from dreamgym_pl.models import train_word_tokenizer
    from dreamgym_pl.stages.experience import experience_model

    tok = train_word_tokenizer(["a small text to train on"], 100)
    cfg = OmegaConf.create({"seed": 0, "model": {"name_or_path": "tiny", "hidden_size": 16, "num_layers": 1,
                                                 "num_heads": 2, "intermediate_size": 32, "max_positions": 64},
                            "experience": {"model": "policy", "lora": None}})
    run = SimpleNamespace(cfg=cfg, load_policy=lambda: (None, tok))
    same, _ = experience_model(run)
    assert (same.config.hidden_size, same.config.num_hidden_layers, same.config.intermediate_size) == (16, 1, 32)


def test_bounded_trajectories_keep_whole_ones_of_every_agent_in_order():
    from dreamgym_pl.core import Observation, Task, Trajectory, Transition
    from dreamgym_pl.experience.module import bounded_trajectories

    def tr(agent, i, n):
        t = Task(f"{agent}{i}", "x")
        return Trajectory(task=t, transitions=[Transition(t, s, Observation("s", []), "a", Observation("n", []), 0.0,
                                                          s == n - 1, info={"episode": f"{agent}-{i}"})
                                               for s in range(n)], source=agent)

    trajs = [tr("oracle", i, 3) for i in range(20)] + [tr("random", i, 3) for i in range(20)]
    kept = bounded_trajectories(trajs, 30, seed=0)
    assert sum(len(t.transitions) for t in kept) == 30 and len(kept) == 10
    assert [trajs.index(t) for t in kept] == sorted(trajs.index(t) for t in kept)  # the original order
    assert {t.source for t in kept} == {"oracle", "random"}  # not the first 30 transitions (all oracle)
    assert bounded_trajectories(trajs, 30, seed=0) == kept and bounded_trajectories(trajs, 0) == trajs
    assert len(bounded_trajectories(trajs, 31, seed=0)) == 11  # the trajectory crossing the bound is kept
