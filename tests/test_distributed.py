"""Data-parallel training on CPU: 2 processes (torchrun, gloo) run the real-env RL stage, the synthetic RL
stage and eval; both ranks must end with identical weights, split the rollouts (no task rolled out twice in an
iteration), and merge budget counters, the replay buffer and eval's per-goal outcomes."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from dreamgym_pl.pipeline import run_pipeline
from tests.conftest import ROOT, compose
from tests.test_pipeline import EXP, TINY

DDP = ["rl.tasks_per_iter=4", "synthetic_rl.tasks_per_iter=4", "curriculum.lambda_=0.5", "curriculum.min_variance=0.01",
       "eval.curve_every=1", "eval.curve_goals=4"]


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    d = tmp_path_factory.mktemp("ddp_start")
    run_pipeline(compose(["stages=[collect,sft,experience]", *TINY, *EXP]), d)
    return d


def test_ddp_two_cpu_processes(start, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(start, d)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(ROOT / "experiments" / "run.py"), "trainer=ddp_cpu", "resume=true", f"hydra.run.dir={d}",
           "stages=[collect,sft,experience,rl,synthetic_rl,eval]", *TINY, *EXP, *DDP]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    m = json.loads((d / "metrics.json").read_text())
    for stage in ("rl", "synthetic_rl"):
        r0, r1 = (json.loads((d / "ranks" / f"{stage}_rank{r}.json").read_text()) for r in (0, 1))
        assert r0["world"] == r1["world"] == 2
        assert r0["weights_sha1"] == r1["weights_sha1"]  # DDP kept the replicas identical
        assert len(r0["tasks"]) == len(r1["tasks"]) > 0
        for a, b in zip(r0["tasks"], r1["tasks"]):  # rollouts split: no task on both ranks in an iteration
            assert a and b and not set(a) & set(b)
        assert r0["transitions"] == r1["transitions"] == r0["local_transitions"] + r1["local_transitions"]
    rl0, rl1 = (json.loads((d / "ranks" / f"rl_rank{r}.json").read_text()) for r in (0, 1))
    assert m["rl/real_transitions"] == rl0["local_transitions"] + rl1["local_transitions"]
    assert m["budget/real_transitions"] == m["collect/real_transitions"] + m.get("experience/real_transitions", 0) \
        + m["rl/real_transitions"]
    s0, s1 = (json.loads((d / "ranks" / f"synthetic_rl_rank{r}.json").read_text()) for r in (0, 1))
    assert m["synthetic_rl/synthetic_transitions"] == s0["local_transitions"] + s1["local_transitions"]
    assert m["budget/synthetic_transitions"] == m["synthetic_rl/synthetic_transitions"]
    assert s0["replay_size"] == s1["replay_size"]  # every rank holds the merged buffer
    from dreamgym_pl.stages import Run
    from dreamgym_pl.stages.experience import load_replay

    buf = load_replay(Run(compose(["resume=true", *TINY, *EXP]), d))
    assert len(buf) == s0["replay_size"]
    tags = [it.info.get("rank") for it, src in zip(buf.items, buf.sources) if src == "synthetic"]
    assert tags.count(0) == s0["own_unique"]  # rank 0's transitions, each once
    assert tags.count(1) <= s1["own_unique"]  # rank 1's, each at most once (minus exact duplicates of rank 0's)
    assert json.loads((d / "stages.json").read_text())["completed"][-3:] == ["rl", "synthetic_rl", "eval"]
    # eval: both ranks' episodes in one outcomes file, each goal once, consistent with the summed success
    rows = [json.loads(line) for line in (d / "eval" / "test_outcomes.jsonl").read_text().splitlines()]
    assert len(rows) == len({r["task_id"] for r in rows}) == m["eval/num_goals"]
    assert sum(r["success"] for r in rows) / len(rows) == pytest.approx(m["eval/success_rate"])
    assert not list((d / "eval").glob("*rank*"))


def _sync_worker(rank: int, world: int, init: str, out: str) -> None:
    import torch.distributed as tdist

    from dreamgym_pl.core import Observation, Task, Transition
    from dreamgym_pl.experience.synthetic_env import SyntheticEnv
    from dreamgym_pl.replay.buffer import ReplayBuffer
    from dreamgym_pl.replay.embed import make_embedder

    tdist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    buf = ReplayBuffer(make_embedder("hashing", 64), capacity=16)
    senv = SyntheticEnv(None, buf, None, None, lambda split: [], lambda a, o: True, None)
    task = Task("t", "buy a lamp")
    # rank r produces transitions r*10 .. r*10+14: ranks overlap on 10..14 (exact duplicates)
    senv.pending = [Transition(task, 0, Observation(f"s{i}"), "click[x]", Observation(f"n{i}"), 0.0, False,
                               source="synthetic") for i in range(rank * 10, rank * 10 + 15)]
    added = senv.sync_enrichment()
    with open(out, "w") as f:
        json.dump({"added": added, "size": len(buf), "states": [it.state.text for it in buf.items]}, f)
    tdist.destroy_process_group()


def test_replay_enrichment_is_merged_across_ranks(tmp_path):
    """Each rank's fresh synthetic transitions reach every rank's buffer exactly once, in rank order."""
    import torch.multiprocessing as mp

    init = f"file://{tmp_path / 'pg'}"
    outs = [str(tmp_path / f"r{r}.json") for r in range(2)]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_sync_worker, args=(r, 2, init, outs[r])) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    r0, r1 = (json.loads(open(o).read()) for o in outs)
    assert r0 == r1  # identical buffers on both ranks
    assert r0["added"] == r0["size"] == 25  # 0..24: union of 0..14 and 10..24, duplicates added once
    assert r0["states"] == [f"s{i}" for i in range(25)]
