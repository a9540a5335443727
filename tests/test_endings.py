"""Extra training on episode-ending steps (experience/endings.py): which samples are endings, the class balance,
the mix with regular samples, and one tiny run of the phase."""

import math
import random

import pytest

from dreamgym_pl.core import Observation, Task, Trajectory, Transition
from dreamgym_pl.experience.endings import balanced, ending_mix, ending_samples


def traj(task, rewards_done, truncated=False):
    t = Task(task, f"buy {task}")
    steps = [Transition(t, i, Observation(f"page {i}", ["click[a]"]), "click[a]", Observation("next", []), r, d)
             for i, (r, d) in enumerate(rewards_done)]
    if truncated:
        steps[-1].info["truncated"] = True
    return Trajectory(task=t, transitions=steps)


def test_ending_samples_pick_each_decided_last_step():
    trajs = [traj("a", [(0.0, False), (1.0, True)]),          # success: sample 1
             traj("b", [(0.0, False), (0.5, True)]),          # partial reward: a failure, sample 3
             traj("c", [(0.0, False), (0.0, False), (0.0, True)], truncated=True),  # the step limit: not one
             traj("d", [(0.0, True)])]                        # failed at once: sample 7
    samples = list(range(8))
    assert ending_samples(trajs, samples) == ([3, 7], [1])
    with pytest.raises(ValueError, match="7 samples for 8 transitions"):
        ending_samples(trajs, samples[:7])


def test_balanced_repeats_the_smaller_class():
    assert balanced(["f"], ["s1", "s2", "s3"]) == ["f", "f", "f", "s1", "s2", "s3"]
    assert balanced(["f1", "f2"], ["s"]) == ["f1", "f2", "s", "s"]
    assert balanced([], ["s1", "s2"]) == ["s1", "s2"]
    assert balanced([], []) == []


def test_ending_mix_adds_as_many_distinct_regular_samples():
    mix = ending_mix(["e1", "e2"], list(range(10)), random.Random(0))
    assert mix[:2] == ["e1", "e2"] and len(mix) == 4 and len(set(mix[2:])) == 2 and set(mix[2:]) <= set(range(10))
    assert ending_mix(["e1", "e2", "e3"], [7], random.Random(0)) == ["e1", "e2", "e3", 7]


def test_ending_phase_trains_the_model_on_a_tiny_run():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from dreamgym_pl.experience.endings import ending_phase
    from dreamgym_pl.experience.format import ExperienceFormat, build_target
    from dreamgym_pl.experience.module import experience_samples
    from dreamgym_pl.models import train_word_tokenizer

    trajs = [traj("lamp", [(0.0, False), (1.0, True)]), traj("desk", [(0.0, True)]), traj("mug", [(1.0, True)])]
    fmt = ExperienceFormat(k=0, reasoning=False)
    texts = [build_target(t.next_state, t.reward, t.done, "", fmt) + " buy page click[a] next" for tr in trajs
             for t in tr.transitions]
    tok = train_word_tokenizer(texts, 200)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=256))
    before = [p.detach().clone() for p in model.parameters()]
    regular = experience_samples(trajs, tok, fmt, None)
    assert ending_phase(model, tok, trajs, fmt, None, regular, 0, 1e-2, 2, 0) == {}
    res = ending_phase(model, tok, trajs, fmt, None, regular, 3, 1e-2, 2, 0, warmup_steps=1)
    assert res["experience/ending_failed"] == 1.0 and res["experience/ending_successful"] == 2.0
    assert math.isfinite(res["experience/ending_loss"])
    assert any(not torch.equal(p, q) for p, q in zip(before, model.parameters()))
