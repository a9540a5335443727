"""Distributed helpers: the pipeline runs on every rank (torchrun / SLURM's srun / Lightning's launcher); rank 0
writes files, ranks split rollouts and evaluation, and counters are summed across ranks.

Without a process group (one process) every helper is the identity, so single-process code pays nothing.
"""

from __future__ import annotations

import atexit
import os
from typing import Any, Mapping, Sequence

import torch
import torch.distributed as tdist


def initialized() -> bool:
    return tdist.is_available() and tdist.is_initialized()


def rank() -> int:
    if initialized():
        return tdist.get_rank()
    return int(os.environ.get("RANK", 0))


def world() -> int:
    if initialized():
        return tdist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", 1))


def is_main() -> bool:
    return rank() == 0


def slurm_port(job_id: str | None) -> int:
    """The rendezvous port of a SLURM job: Lightning's rule (15000 + the job id's last 4 digits; 12910 without one),
    so that every task of the job derives the same port without talking to the others."""
    return int(job_id[-4:]) + 15000 if job_id else 12910


def slurm_launch_env(environ: Mapping[str, str], expected_world: int | None = None) -> dict[str, str]:
    """torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) for a process that `srun`
    started as one of several tasks, read from SLURM's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
    SLURM_NODELIST, SLURM_JOB_ID); MASTER_ADDR / MASTER_PORT already set are kept.
    {} when there is nothing to translate: torchrun set RANK or WORLD_SIZE; no SLURM_NTASKS or SLURM_PROCID; a job
    named `bash` or `interactive` (Lightning's convention for "SLURM allocated, another launcher starts the
    processes"); one task; or `expected_world` (the trainer's devices x nodes, when known) differs from SLURM_NTASKS
    (a config Lightning would refuse). Not caught: python started once, without srun, inside an sbatch allocation
    whose task count matches the config: it waits for tasks that never start, as Lightning's trainer would."""
    if "RANK" in environ or "WORLD_SIZE" in environ:
        return {}
    if "SLURM_NTASKS" not in environ or "SLURM_PROCID" not in environ:
        return {}
    if environ.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return {}
    ntasks = int(environ["SLURM_NTASKS"])
    if ntasks <= 1 or (expected_world is not None and expected_world != ntasks):
        return {}
    from lightning.fabric.plugins.environments import SLURMEnvironment  # the same root-node rule as the trainer's

    addr = environ.get("MASTER_ADDR") or SLURMEnvironment.resolve_root_node_address(
        environ.get("SLURM_NODELIST", "127.0.0.1"))
    return {"RANK": str(int(environ["SLURM_PROCID"])), "WORLD_SIZE": str(ntasks),
            "LOCAL_RANK": str(int(environ.get("SLURM_LOCALID", 0))), "MASTER_ADDR": addr,
            "MASTER_PORT": environ.get("MASTER_PORT") or str(slurm_port(environ.get("SLURM_JOB_ID")))}


def init_from_env(accelerator: str = "cpu", expected_world: int | None = None) -> bool:
    """Join the process group described by torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT), or by
    SLURM's when `srun` started the processes (`slurm_launch_env`), before any stage runs, so that stages can
    synchronise and split work from the start; Lightning reuses this group."""
    os.environ.update(slurm_launch_env(os.environ, expected_world))
    if initialized() or int(os.environ.get("WORLD_SIZE", 1)) <= 1:
        return False
    backend = "nccl" if accelerator in ("gpu", "cuda") and torch.cuda.is_available() else "gloo"
    tdist.init_process_group(backend=backend)
    atexit.register(shutdown)  # a group left to the interpreter's teardown can abort a finished run (SIGABRT)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    return True


def shutdown() -> None:
    """Destroy the process group this process joined, if any. Registered at exit by `init_from_env`: without it,
    gloo's worker threads are torn down by C++ static destructors and a run that finished its work can die with
    "terminate called without an active exception" (seen in 2 of 15 two-process runs). Lightning registers the
    same for the groups it creates itself (NCCL only); the pipeline's group is created before Lightning sees it."""
    if initialized():
        tdist.destroy_process_group()


def barrier() -> None:
    if initialized() and world() > 1:
        tdist.barrier()


def _device() -> torch.device:
    if initialized() and tdist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_sum(values: Sequence[float]) -> list[float]:
    """Element-wise sum over ranks."""
    if not initialized() or world() == 1:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_device())
    tdist.all_reduce(t, op=tdist.ReduceOp.SUM)
    return t.tolist()


def all_max(value: int) -> int:
    if not initialized() or world() == 1:
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.int64, device=_device())
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return int(t.item())


def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order (picklable objects)."""
    if not initialized() or world() == 1:
        return [obj]
    out: list[Any] = [None] * world()
    tdist.all_gather_object(out, obj)
    return out


def shard(items: Sequence[Any]) -> list[Any]:
    """This rank's share of `items` (round-robin; the same order on every rank)."""
    return list(items)[rank()::world()]
