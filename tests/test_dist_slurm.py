"""Processes started by `srun` (SLURM's variables, no torchrun ones) join one process group before any stage runs:
the translation is checked against hand-written environments, then two plain processes with an srun-like
environment form a gloo group and sum across it."""

import os
import socket
import subprocess
import sys

from omegaconf import OmegaConf

from dreamgym_pl.dist import slurm_launch_env, slurm_port
from dreamgym_pl.pipeline import expected_world
from tests.conftest import ROOT

SRUN = {"SLURM_NTASKS": "16", "SLURM_PROCID": "9", "SLURM_LOCALID": "1", "SLURM_NODELIST": "gpu[003-004]",
        "SLURM_JOB_ID": "123456", "SLURM_JOB_NAME": "dreamgym"}


def test_srun_task_gets_torchrun_variables():
    assert slurm_launch_env(SRUN) == {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "MASTER_ADDR": "gpu003",
                                      "MASTER_PORT": "18456"}  # 15000 + 3456
    assert slurm_launch_env(SRUN, expected_world=16)["RANK"] == "9"
    kept = slurm_launch_env({**SRUN, "MASTER_ADDR": "head", "MASTER_PORT": "29500"})
    assert (kept["MASTER_ADDR"], kept["MASTER_PORT"]) == ("head", "29500")


def test_nothing_to_translate():
    assert slurm_launch_env({}) == {}
    assert slurm_launch_env({**SRUN, "RANK": "0", "WORLD_SIZE": "2"}) == {}  # torchrun inside an allocation
    assert slurm_launch_env({**SRUN, "SLURM_JOB_NAME": "interactive"}) == {}
    assert slurm_launch_env({**SRUN, "SLURM_JOB_NAME": "bash"}) == {}
    assert slurm_launch_env({**SRUN, "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}) == {}
    assert slurm_launch_env(SRUN, expected_world=8) == {}  # python started once in an sbatch script of 16 tasks
    assert slurm_launch_env({k: v for k, v in SRUN.items() if k != "SLURM_PROCID"}) == {}


def test_port_rule():
    assert slurm_port("987") == 15987
    assert slurm_port("4321") == 19321
    assert slurm_port(None) == 12910


def test_expected_world_from_trainer_config():
    assert expected_world(OmegaConf.create({"devices": 8, "num_nodes": 2})) == 16
    assert expected_world(OmegaConf.create({"devices": 2, "num_nodes": 1})) == 2
    assert expected_world(OmegaConf.create({"devices": "auto", "num_nodes": 2})) is None
    assert expected_world(OmegaConf.create({"devices": -1, "num_nodes": 1})) is None
    assert expected_world(OmegaConf.create({"devices": [0, 1], "num_nodes": 1})) is None


CHILD = """
import os
from dreamgym_pl import dist
assert dist.init_from_env("cpu", 2)
print(dist.rank(), dist.world(), os.environ["LOCAL_RANK"], dist.all_sum([dist.rank() + 1])[0], flush=True)
"""


def test_two_srun_like_processes_form_one_group():
    with socket.socket() as s:  # a free port for this test's rendezvous
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**base, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                              "SLURM_NTASKS": "2", "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r),
                                              "SLURM_NODELIST": "127.0.0.1", "SLURM_JOB_NAME": "t",
                                              "MASTER_PORT": port})
             for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    # each process knows its own rank before any Lightning code ran, and the sum crossed the group: 1 + 2
    assert sorted(o.split() for o, _ in outs) == [["0", "2", "0", "3.0"], ["1", "2", "1", "3.0"]]


def test_agrees_with_lightnings_slurm_environment(monkeypatch):
    """The values the trainer's SLURM environment will read later are the ones the group was formed with."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(k, "")  # recorded, so that what Lightning writes (MASTER_ADDR/PORT) is undone after
        monkeypatch.delenv(k)
    for k, v in {**SRUN, "SLURM_NTASKS_PER_NODE": "8", "SLURM_NNODES": "2", "SLURM_NODEID": "1"}.items():
        monkeypatch.setenv(k, v)
    env = slurm_launch_env(dict(os.environ), expected_world=16)
    le = SLURMEnvironment()
    assert (le.main_address, str(le.main_port)) == (env["MASTER_ADDR"], env["MASTER_PORT"])
    assert (str(le.global_rank()), str(le.world_size()), str(le.local_rank())) == \
        (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"])


def test_pipeline_passes_the_trainers_world(monkeypatch, tmp_path):
    """run_pipeline hands init_from_env the trainer's devices x nodes (the guard against a mismatched SLURM job)."""
    import dreamgym_pl.pipeline as pipeline
    from tests.conftest import compose

    seen = []

    def stop(accelerator, expected):
        seen.append((accelerator, expected))
        raise RuntimeError("stop before any stage")

    monkeypatch.setattr(pipeline.dist, "init_from_env", stop)
    try:
        pipeline.run_pipeline(compose(["trainer=ddp_cpu"]), tmp_path)
    except RuntimeError:
        pass
    assert seen == [("cpu", 2)]
