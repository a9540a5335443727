"""DeepSpeed ZeRO (trainer=deepspeed) through Lightning's DeepSpeedStrategy: what our fits need of it, read against
Lightning's and DeepSpeed's sources (none of it runs on the CPU path; each is imported only where used).

- `configure_trainer(trainer)` (every fit, `Run.trainer`): the DeepSpeed config gets its logging batch size
  (`train_micro_batch_size_per_gpu`): our loaders yield whole batches (`DataLoader(batch_size=None)`), whose
  `batch_sampler` is None, and Lightning's `_auto_select_batch_size` reads `batch_sampler.batch_size`; and the
  precision plugin keeps the batch's float tensors float32 (`Float32BatchDeepSpeedPrecision`): Lightning's casts every
  float tensor of a batch to bfloat16, the RL batch's old / reference log-probs, advantages and returns included,
  computed in float32 (only token ids go into the model, so nothing needs the cast).
- `optimizer_class(strategy)`: DeepSpeedCPUAdam under ZeRO-Offload of the optimizer (DeepSpeed refuses a
  torch optimizer there: `zero_force_ds_cpu_optimizer`), else torch's AdamW.
- ZeRO's optimizer state is partitioned: each rank's `state_dict()` holds its partition, and its `load_state_dict`
  takes the list of every rank's (indexed by the data-parallel rank). `save_optimizer` / `read_optimizer` /
  `load_optimizer` keep one file per rank under ZeRO, one file as before otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

LOGGING_BATCH_SIZE = 1  # DeepSpeed's train_micro_batch_size_per_gpu: its throughput logs only (our loaders batch)


def is_deepspeed(strategy: Any) -> bool:
    try:
        from lightning.pytorch.strategies import DeepSpeedStrategy
    except ImportError:  # pragma: no cover
        return False
    return isinstance(strategy, DeepSpeedStrategy)


def _zero_config(strategy: Any) -> dict:
    cfg = getattr(strategy, "config", None) or {}
    return dict(cfg.get("zero_optimization") or {}) if isinstance(cfg, dict) else {}


def offloads_optimizer(strategy: Any) -> bool:
    """Whether `strategy` (a DeepSpeedStrategy, or anything with its `config` dict) offloads the optimizer states."""
    off = _zero_config(strategy).get("offload_optimizer")
    if isinstance(off, dict):
        return str(off.get("device", "none")) not in ("none", "None", "")
    return bool(off)


def cpu_adam_class() -> Any:
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    return DeepSpeedCPUAdam


def optimizer_class(strategy: Any) -> Any:
    """The optimizer class a fit under `strategy` must use: DeepSpeedCPUAdam with ZeRO-Offload, else AdamW."""
    return cpu_adam_class() if strategy is not None and offloads_optimizer(strategy) else torch.optim.AdamW


try:
    from lightning.pytorch.plugins.precision.deepspeed import DeepSpeedPrecision as _DSPrecision
except ImportError:  # pragma: no cover
    _DSPrecision = object  # type: ignore[assignment,misc]


class Float32BatchDeepSpeedPrecision(_DSPrecision):  # type: ignore[misc,valid-type]
    """Lightning's DeepSpeedPrecision, except that a batch's tensors reach the training step as they were made: the
    model runs in DeepSpeed's bfloat16 on token ids, and the loss's float32 inputs (old_logp, ref_logp, adv,
    returns, old_values, ref_seq_logp, loss_mask) stay float32."""

    def convert_input(self, data: Any) -> Any:
        return data


def configure_trainer(trainer: Any) -> Any:
    """A Lightning Trainer made ready for our fits under DeepSpeed (`trainer.strategy`): the logging batch size set
    when the config has none, and the float32-keeping precision plugin. Other strategies: unchanged."""
    strategy = getattr(trainer, "strategy", None)
    if not is_deepspeed(strategy):
        return trainer
    if isinstance(strategy.config, dict):
        strategy.config.setdefault("train_micro_batch_size_per_gpu", LOGGING_BATCH_SIZE)
    plugin = strategy.precision_plugin
    if type(plugin) is not Float32BatchDeepSpeedPrecision:
        strategy.precision_plugin = Float32BatchDeepSpeedPrecision(plugin.precision)
    return trainer


# ----- optimizer state ---------------------------------------------------------------------------------------------
def is_zero_optimizer(optimizer: Any) -> bool:
    """Whether `optimizer` is DeepSpeed's partitioned ZeRO optimizer (stage 1/2: DeepSpeedZeroOptimizer; stage 3:
    DeepSpeedZeroOptimizer_Stage3): a per-rank state whose `load_state_dict` takes every rank's as a list."""
    return type(optimizer).__name__.startswith("DeepSpeedZeroOptimizer")


def save_optimizer(optimizer: Any, folder: Path, rank: int, main: bool) -> None:
    """The optimizer state into `folder`: under ZeRO every rank writes its partition (`optimizer_rank<r>.pt`),
    otherwise rank 0 writes `optimizer.pt` (the replicas are equal)."""
    if is_zero_optimizer(optimizer):
        torch.save(optimizer.state_dict(), Path(folder) / f"optimizer_rank{rank}.pt")
    elif main:
        torch.save(optimizer.state_dict(), Path(folder) / "optimizer.pt")


_RANK_FILE = re.compile(r"optimizer_rank(\d+)\.pt$")


def read_optimizer(folder: Path) -> Any:
    """What `save_optimizer` wrote into `folder`: a state dict, the list of every rank's ZeRO partition (in rank
    order), or None."""
    folder = Path(folder)
    if (folder / "optimizer.pt").exists():
        return torch.load(folder / "optimizer.pt", weights_only=True)
    parts = sorted((int(m.group(1)), p) for p in folder.glob("optimizer_rank*.pt") if (m := _RANK_FILE.search(p.name)))
    if not parts:
        return None
    if [r for r, _ in parts] != list(range(len(parts))):
        raise ValueError(f"{folder}: ZeRO optimizer partitions of ranks {[r for r, _ in parts]}, not 0..{len(parts) - 1}")
    # DeepSpeed's own objects (its loss scaler) are in a partition: our own files, loaded whole
    return [torch.load(p, weights_only=False) for _, p in parts]


def load_optimizer(optimizer: Any, saved: Any) -> None:
    """Load `saved` (`read_optimizer`'s) into `optimizer`: ZeRO takes the list of partitions (a single state dict is
    one rank's); a torch optimizer takes one state dict."""
    if saved is None:
        return
    if is_zero_optimizer(optimizer):
        optimizer.load_state_dict(saved if isinstance(saved, list) else [saved])
    elif isinstance(saved, list):
        raise ValueError(f"a ZeRO-partitioned optimizer state ({len(saved)} ranks) cannot be loaded into "
                         f"{type(optimizer).__name__}: resume with the strategy that saved it (trainer=deepspeed)")
    else:
        optimizer.load_state_dict(saved)
