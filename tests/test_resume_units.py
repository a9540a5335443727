"""Small parts of kill-anywhere resume, against hand-computed values: the resumed loader, manifests and pointer
swaps, derived budgets, counted real interactions."""

import torch
from torch.utils.data import DataLoader

import pytest

from dreamgym_pl.run import CorruptFileError, VersionedDir
from dreamgym_pl.stages.resume import _Rest, check_world, seed_stage, total_steps


def _loader():
    return DataLoader(list(range(10)), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(5))


def _flat(batches):
    return [b.tolist() for b in batches]


def test_rest_of_a_loader_equals_the_uninterrupted_tail():
    """10 items in batches of 3 -> 4 batches an epoch; 9 steps cross two epoch ends. Skipping 5 and going on
    gives exactly batches 5..8 of one uninterrupted pass (the shuffling generator advances the same way)."""
    straight = []
    loader = _loader()
    while len(straight) < 9:
        for b in loader:
            straight.append(b)
            if len(straight) == 9:
                break
    rest = _Rest(_loader(), skip=5, total=9)
    assert len(rest) == 4
    assert _flat(list(rest)) == _flat(straight[5:9])
    assert sorted(x for b in straight[:4] for x in b.tolist()) == list(range(10))  # one epoch sees every item


def test_total_steps():
    assert total_steps(_loader(), 7, 3) == 7      # max_steps wins
    assert total_steps(_loader(), 0, 3) == 12     # 3 epochs x 4 batches
    assert total_steps(_loader(), -1, 1) == 4
    assert total_steps(_loader(), 7, 3, world=2) == 7   # max_steps: each rank's steps
    assert total_steps(_loader(), 0, 3, world=2) == 6   # 12 batches shared by 2 ranks
    assert total_steps(_loader(), 0, 1, world=3) == 2   # 4 batches on 3 ranks: rounded up, equal on every rank


def test_rest_shards_the_one_sequence_among_ranks():
    """Two ranks take alternate batches of the same seeded sequence (g mod 2), so together they see an epoch's
    items once; a rank resumed after its first `skip` batches yields exactly its uninterrupted tail."""
    straight = _flat(_Rest(_loader(), skip=0, total=8))  # 8 batches = 2 epochs of one process
    r0 = _flat(_Rest(_loader(), skip=0, total=4, rank=0, world=2))
    r1 = _flat(_Rest(_loader(), skip=0, total=4, rank=1, world=2))
    assert r0 == straight[0::2] and r1 == straight[1::2]
    assert sorted(x for b in r0[:2] + r1[:2] for x in b) == list(range(10))  # the first epoch, split
    assert _flat(_Rest(_loader(), skip=3, total=4, rank=1, world=2)) == r1[3:]
    assert len(_Rest(_loader(), skip=1, total=4, rank=1, world=2)) == 3
    with pytest.raises(ValueError, match="rank 2"):
        _Rest(_loader(), 0, 4, rank=2, world=2)


def test_a_step_checkpoint_resumes_only_under_its_world_size():
    fix = "delete ck/resume to restart sft from its first step"
    check_world(1, 1, "ck/resume/step-000004", fix)
    check_world(2, 2, "ck/resume/step-000004", fix)
    with pytest.raises(ValueError) as e:
        check_world(1, 2, "ck/resume/step-000004", fix)
    msg = str(e.value)
    assert "written by 1 rank(s)" in msg and "has 2" in msg and "trainer.devices" in msg and "ck/resume" in msg


def test_seed_stage_depends_on_seed_and_stage_only():
    seed_stage(0, "sft")
    a = torch.rand(3)
    torch.rand(100)  # whatever ran before
    seed_stage(0, "sft")
    assert torch.equal(torch.rand(3), a)
    seed_stage(0, "experience")
    assert not torch.equal(torch.rand(3), a)


def test_versioned_dir_manifest_and_pointer(tmp_path):
    store = VersionedDir(tmp_path / "ck", prefix="it", fix="do X")
    v0 = store.new(0)
    (v0 / "a.json").write_text('{"x": 1}')
    store.commit(v0)
    v1 = store.new(1)
    (v1 / "a.json").write_text('{"x": 2}')
    assert store.current() == v0  # not committed yet: the old version is live
    store.commit(v1)
    assert store.current() == v1 and not v0.exists()
    (v1 / "a.json").write_text('{"x": 3}')  # same size, other bytes: the checksum tells
    with pytest.raises(CorruptFileError, match=r"a.json: corrupt .*; do X$"):
        store.current()


def test_budgets_are_sums_of_stage_counters(tmp_path):
    """Recording a stage's counters twice (a stage redone after a kill) does not count twice."""
    from dreamgym_pl.stages.context import Run
    from tests.conftest import compose

    run = Run(compose(["env.num_products=50", "env.num_test=10", "env.num_val=10"]), tmp_path)
    run.record({"collect/real_transitions": 100})
    run.record({"experience/outcome_real_transitions": 7, "experience/real_transitions": 20})
    run.record({"s2r/real_transitions": 30, "synthetic_rl/synthetic_transitions": 40, "synthetic_rl/real_resets": 4})
    run.record({"s2r/real_transitions": 30})  # again
    assert run.metrics["budget/real_transitions"] == 157.0
    assert run.metrics["budget/synthetic_transitions"] == 40.0 and run.metrics["budget/real_resets"] == 4.0


def test_stored_starts_count_real_resets(shop):
    """Each start task's first observation is fetched from the real env once (a counted reset), then served
    from the store; a generated task fetches its own (its page shows its instruction); the store survives a
    state_dict round trip, fetch count included."""
    from dreamgym_pl.core import Task
    from dreamgym_pl.envs.meter import EnvMeter, StoredStarts
    from dreamgym_pl.envs.webshop.vec import WebShopVecEnv
    from dreamgym_pl.stages.synthetic_rl import start_task

    env = WebShopVecEnv(shop, 10, True, "index")
    a, b = env.tasks("train")[:2]
    gen = Task("gen-0", "a new instruction", {"generated": True, "parent_goal": a.goal}, a.task_id, 1)
    meter = EnvMeter(env)
    starts = StoredStarts(meter, start_task)
    first = starts(a)
    for t in (a, b, a, gen, gen, b):
        starts(t)
    assert (starts.fetched, meter.resets, meter.transitions) == (3, 3, 0)
    assert starts(a).text == first.text == env.initial_observation(a).text
    assert "a new instruction" in starts(gen).text
    again = StoredStarts(EnvMeter(env), start_task)
    again.load_state_dict(starts.state_dict())
    assert again(a).text == first.text and again.fetched == 3 and again.meter.resets == 0
    meter.reset([a, b])
    meter.step(["search[x]", None])
    assert (meter.resets, meter.transitions) == (5, 1)
