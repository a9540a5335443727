"""Distributed helpers: the pipeline runs on every rank (torchrun / SLURM / Lightning's launcher); rank 0
writes files, ranks split rollouts and evaluation, and counters are summed across ranks.

Without a process group (one process) every helper is the identity, so single-process code pays nothing.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

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


def init_from_env(accelerator: str = "cpu") -> bool:
    """Join the process group described by torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT)
    before any stage runs, so that stages can synchronise from the start; Lightning reuses this group."""
    if initialized() or int(os.environ.get("WORLD_SIZE", 1)) <= 1:
        return False
    backend = "nccl" if accelerator in ("gpu", "cuda") and torch.cuda.is_available() else "gloo"
    tdist.init_process_group(backend=backend)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    return True


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
