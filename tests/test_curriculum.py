import random

import numpy as np
import pytest
from hypothesis import given, strategies as st

from dreamgym_pl.core import Task
from dreamgym_pl.curriculum import (cluster_groups, group_variances, max_generated, mix_batch, parse_generated_task,
                                    select_seeds, task_variance)


def test_variance_hand_computed():
    assert task_variance([1, 1, 1, 1]) == 0.0
    assert task_variance([0, 0, 0]) == 0.0
    assert task_variance([1, 0, 1, 0]) == 0.25
    assert task_variance([1, 0, 0, 0]) == pytest.approx(0.1875)  # mean .25: (.5625 + 3 * .0625) / 4
    assert group_variances(["a", "a", "b", "b"], [1, 0, 1, 1]) == {"a": 0.25, "b": 0.0}


def test_selection_order_and_threshold():
    v = {"a": 0.25, "b": 0.1875, "c": 0.0, "d": 0.25, "e": 0.05}
    assert select_seeds(v, 0.1, 10) == ["a", "d", "b"]
    assert select_seeds(v, 0.1, 2) == ["a", "d"]
    assert select_seeds(v, 0.3, 5) == []


@given(st.integers(1, 200), st.floats(0.0, 1.0), st.integers(0, 300))
def test_lambda_bound_holds_for_every_batch(b, lam, n_gen):
    orig = [Task(f"o{i}", "x") for i in range(250)]
    gen = [Task(f"g{i}", "y", parent_id="o0", generation=1) for i in range(n_gen)]
    batch = mix_batch(orig, gen, b, lam, random.Random(0))
    n_g = sum(1 for t in batch if t.parent_id is not None)
    assert n_g <= lam * b + 1e-9
    assert len(batch) == b
    assert n_g == min(n_gen, max_generated(b, lam))


def test_lambda_zero_generates_none_and_bad_lambda():
    orig = [Task(f"o{i}", "x") for i in range(10)]
    gen = [Task("g", "y", parent_id="o1")]
    assert all(t.parent_id is None for t in mix_batch(orig, gen, 8, 0.0, random.Random(0)))
    with pytest.raises(ValueError, match="curriculum.lambda_"):
        max_generated(8, 1.5)


def test_clusters_group_similar_rows():
    x = np.array([[1, 0], [0.99, 0.05], [0, 1], [0.02, 0.98]], dtype=np.float32)
    labels = cluster_groups(x, 2, seed=0)
    assert labels[0] == labels[1] and labels[2] == labels[3] and labels[0] != labels[2]


def test_parse_generated_task():
    assert parse_generated_task("< task > i need red tea < / task >") == "i need red tea"
    assert parse_generated_task("no tags") is None
    assert parse_generated_task("<task> </task>") is None
    assert parse_generated_task("<task> " + "w " * 50 + "</task>", max_words=40) is None


def test_generated_task_never_equals_a_held_out_instruction():
    from types import SimpleNamespace

    from dreamgym_pl.curriculum import Curriculum

    train = [Task(f"t{i}", f"buy tea {i}") for i in range(4)]
    outputs = iter([["<task> buy a test tea </task>", "<task> buy a new tea </task>"]])
    cur = Curriculum(train, lambda prompts: next(outputs)[: len(prompts)], lambda trajs: {"t0": 0.25, "t1": 0.25},
                     max_share=0.5, min_variance=0.05, num_seeds=2, batch_size=4, held_out=["buy a test tea"])
    cur.update([SimpleNamespace(task=t) for t in train])
    assert [t.instruction for t in cur.state.generated] == ["buy a new tea"] and cur.state.rejected == 1
