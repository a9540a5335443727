"""Resume inside the supervised stages (sft, dpo, experience): a checkpoint every `checkpoint_steps` optimizer
steps, and at the end of training, under the same pointer scheme as RL checkpoints
(checkpoints/<stage>/resume/step-NNNNNN/, one atomic swap of CURRENT), so that a kill costs at most
`checkpoint_steps` steps.

A checkpoint holds the trainable weights (all weights, or a LoRA adapter's), the optimizer, the lr schedule and
the step count. A resumed stage rebuilds everything else as it did the first time (data, model, loaders: all
seeded), loads the checkpoint, and trains on the batches its loader would have yielded after that step: the
loader is iterated from its start (its shuffling generator advancing exactly as in the uninterrupted run) and
the first `step` batches are skipped. So the resumed training equals the uninterrupted one. Data-parallel
runs (world > 1) shard the same seeded sequence of batches themselves instead of Lightning's DistributedSampler
(global batch g goes to rank g mod world, `_Rest`), so each rank skips its own first `step` batches the same way;
under ZeRO every rank also saves its optimizer partition (policy/zero.py).
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader, IterableDataset

from dreamgym_pl import dist
from dreamgym_pl.policy.zero import read_optimizer, save_optimizer
from dreamgym_pl.run import VersionedDir, atomic_write_json, read_json, reading

log = logging.getLogger("dreamgym_pl")


def seed_stage(seed: int, stage: str) -> None:
    """Random states (python, torch) that depend on (seed, stage) only: every stage starts from them, so that a
    stage run after a resume (its predecessors skipped) draws what it would have drawn in one uninterrupted run."""
    import random
    import zlib

    s = (seed * 1_000_003 + zlib.crc32(stage.encode())) % (2 ** 31)
    random.seed(s)
    torch.manual_seed(s)


def step_store(run: Any, stage: str) -> VersionedDir:
    root = run.dir / "checkpoints" / stage / "resume"
    return VersionedDir(root, prefix="step", fix=f"delete {root} to restart {stage} from its first step (the stages "
                                                  f"before it stay done), or rerun with resume=false")


def total_steps(loader: DataLoader, max_steps: int, epochs: int, world: int = 1) -> int:
    """Optimizer steps of a stage (on each of `world` ranks): `max_steps` when > 0, else `epochs` passes over the
    loader's batches shared among the ranks (rounded up: every rank takes the same number of steps)."""
    return max_steps if max_steps > 0 else -(-epochs * len(loader) // max(1, world))


def _trainable(module: L.LightningModule) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in module.named_parameters() if p.requires_grad}


def resumes_from_step(run: Any, stage: str) -> bool:
    """Whether `stage` continues from a step checkpoint: resume=true and a checkpoint present (every rank of a
    data-parallel run reads the same one)."""
    return bool(run.cfg.resume) and step_store(run, stage).current() is not None


def check_world(saved: int, now: int, vdir: Any, fix: str) -> None:
    """A step checkpoint resumes only under the number of ranks that wrote it: its `step` counts each rank's own
    batches of the sharded sequence (`_Rest`) and its optimizer may be one ZeRO partition per rank, so under another
    world size batches would be skipped or trained twice. (Checkpoints without a `world` were written by 1 rank.)"""
    if saved != now:
        raise ValueError(f"{vdir}: this step checkpoint was written by {saved} rank(s) and this run has {now}; "
                         f"resume with trainer.devices x trainer.num_nodes = {saved}, or {fix}")


def load_step_state(run: Any, stage: str, module: L.LightningModule) -> dict | None:
    """With resume=true and a step checkpoint of `stage`: its trainable weights loaded into `module`, and
    {"step", "optimizer", "scheduler"}; else None."""
    if not resumes_from_step(run, stage):
        return None
    store = step_store(run, stage)
    vdir = store.current()
    progress = read_json(vdir / "progress.json", store.fix, keys=("step", "total"))
    check_world(int(progress.get("world", 1)), dist.world(), vdir, store.fix)
    state: dict[str, Any] = {"step": int(progress["step"])}
    for name in ("weights", "scheduler"):
        path = vdir / f"{name}.pt"
        with reading(path, store.fix):
            state[name] = torch.load(path, weights_only=True) if path.exists() else None
    with reading(vdir / "optimizer.pt", store.fix):  # (or ZeRO's optimizer_rank<r>.pt, one per rank)
        state["optimizer"] = read_optimizer(vdir)
    with reading(vdir / "weights.pt", store.fix):
        missing, unexpected = module.load_state_dict(state.pop("weights"), strict=False)
        want = set(_trainable(module))
        if unexpected or want & set(missing):
            raise ValueError(f"weights of another model (missing {sorted(want & set(missing))[:3]}, "
                             f"unexpected {unexpected[:3]})")
    log.info("%s: resuming from step %d of %d", stage, state["step"], progress["total"])
    return state



class ContinuedTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoardLogger whose steps start at `step_offset`: a resumed stage's fit counts its steps from
    0 again, into the same tb/<stage> folder; the checkpoint callbacks set the offset to the steps trained before
    the checkpoint, so the curves go on instead of restarting at step 0 (0 on a fresh stage: its logs unchanged)."""

    step_offset = 0

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        super().log_metrics(metrics, None if step is None else int(step) + int(self.step_offset))


def continue_steps(trainer: L.Trainer, done: int) -> None:
    """Start `trainer`'s TensorBoard steps at `done` (the optimizer steps before the checkpoint it resumes from)."""
    for logger in getattr(trainer, "loggers", None) or []:
        if isinstance(logger, ContinuedTensorBoardLogger):
            logger.step_offset = int(done)


def logged_step(trainer: L.Trainer) -> int:
    """The step count a checkpoint records: the stage's optimizer steps so far, earlier fits' included."""
    offset = max([int(lg.step_offset) for lg in (getattr(trainer, "loggers", None) or [])
                  if isinstance(lg, ContinuedTensorBoardLogger)] or [0])
    return offset + int(trainer.global_step)


def restore_optimizer(trainer: L.Trainer, state: dict | None) -> None:
    """Load a checkpoint's optimizer and lr-scheduler states (when it has them) into `trainer` at train start."""
    from dreamgym_pl.policy.zero import load_optimizer

    st = state or {}
    if st.get("optimizer") is not None:  # a state dict, or under ZeRO every rank's partition (policy/zero.py)
        load_optimizer(trainer.optimizers[0], st["optimizer"])
    if st.get("scheduler") is not None and trainer.lr_scheduler_configs:
        trainer.lr_scheduler_configs[0].scheduler.load_state_dict(st["scheduler"])

class StepCheckpoint(L.Callback):
    """Saves a step checkpoint every `every` optimizer steps and after the last one; restores the optimizer and
    lr schedule of a resumed stage (`state`), whose step count starts at `state["step"]`."""

    def __init__(self, run: Any, stage: str, every: int, total: int, state: dict | None = None):
        self.run, self.stage, self.every, self.total, self.state = run, stage, every, total, state
        self.done = int(state["step"]) if state else 0
        self.saved = self.done

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        restore_optimizer(trainer, self.state)
        continue_steps(trainer, self.done)

    def _step(self, trainer: L.Trainer) -> int:
        return self.done + trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = self._step(trainer)
        if step > self.saved and (step % self.every == 0 or step >= self.total):
            self.save(trainer, pl_module, step)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._step(trainer) > self.saved:
            self.save(trainer, pl_module, self._step(trainer))

    def save(self, trainer: L.Trainer, pl_module: L.LightningModule, step: int) -> None:
        """Rank 0 makes the version folder; every rank writes its ZeRO optimizer partition (else rank 0 the
        optimizer); rank 0 writes the rest and commits. The ranks reach this at the same step."""
        self.saved = step
        store = step_store(self.run, self.stage)
        vdir = store.root / f"{store.prefix}-{step:06d}"
        if dist.is_main():
            store.new(step)
        dist.barrier()
        save_optimizer(trainer.optimizers[0], vdir, dist.rank(), dist.is_main())
        dist.barrier()
        if not dist.is_main():
            return
        torch.save(_trainable(pl_module), vdir / "weights.pt")
        if trainer.lr_scheduler_configs:
            torch.save(trainer.lr_scheduler_configs[0].scheduler.state_dict(), vdir / "scheduler.pt")
        atomic_write_json(vdir / "progress.json", {"step": step, "total": self.total, "world": dist.world()})
        store.commit(vdir)


class _Rest(IterableDataset):
    """Rank `rank` of `world`'s batches of `loader` (the g-th batch of the passes goes to rank g mod world; all of
    them in one process) after its first `skip`, epoch after epoch, up to `total` of its own in all."""

    def __init__(self, loader: DataLoader, skip: int, total: int, rank: int = 0, world: int = 1):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside a world of {world}")
        self.loader, self.skip, self.total, self.rank, self.world = loader, skip, total, rank, world

    def __len__(self) -> int:
        return self.total - self.skip

    def __iter__(self) -> Iterator[Any]:
        seen = g = 0  # this rank's batches so far; batches of the passes so far
        while seen < self.total:
            for batch in self.loader:  # a new pass draws its order from the loader's generator, as Lightning's would
                mine, g = g % self.world == self.rank, g + 1
                if not mine:
                    continue
                if seen >= self.skip:
                    yield batch
                seen += 1
                if seen >= self.total:
                    return


def fit(run: Any, stage: str, module: L.LightningModule, loader: DataLoader, val_loader: DataLoader | None = None,
        max_steps: int = -1, epochs: int = 1, **trainer_kwargs: Any) -> None:
    """`Trainer.fit` of a supervised stage with step checkpoints (`checkpoint_steps`), resumed from the stage's
    last one when resume=true. `max_steps` > 0 bounds the optimizer steps, else `epochs` passes."""
    world = dist.world()
    total = total_steps(loader, max_steps, epochs, world)
    state = load_step_state(run, stage, module)
    done = state["step"] if state else 0
    callbacks = [StepCheckpoint(run, stage, int(run.cfg.checkpoint_steps), total, state)]
    if done >= total:
        return  # trained to the end before the kill: only what follows training is redone
    if done or world > 1:  # the rest of this rank's batches, as one pass (no DistributedSampler: an iterable)
        loader = DataLoader(_Rest(loader, done, total, dist.rank(), world), batch_size=None)
        trainer_kwargs.update(max_epochs=1, max_steps=total - done)
        if trainer_kwargs.get("val_check_interval"):
            trainer_kwargs["val_check_interval"] = min(trainer_kwargs["val_check_interval"], total - done)
    else:
        trainer_kwargs.update(max_epochs=-1 if max_steps > 0 else epochs, max_steps=max_steps if max_steps > 0 else -1)
    run.trainer(stage, callbacks, **trainer_kwargs).fit(module, loader, val_loader)
