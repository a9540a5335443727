"""Mixed precision: `trainer.precision: auto` resolved for this machine (`resolve`), and the training loops that run
outside a Lightning fit (the copy warm starts, the outcome model) under the same precision as the fits, as a
`torch.autocast` context.

Why: on a CPU with AMX (the `amx_bf16` flag in /proc/cpuinfo) bfloat16 matrix products run on the tile unit; the
outcome model's training step (all-MiniLM-L6-v2, 16 examples) took 0.65-0.73 s in float32 and 0.40-0.42 s under
bfloat16 autocast (README, "bfloat16 on CPU"). Weights, optimiser state and losses stay float32 ("-mixed").
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

# trainer.precision values (Lightning's names) whose fits autocast to bfloat16. Every other value runs these loops
# without autocast: 32/64-true and bf16/16-true (whole-model dtypes, set where the model is loaded), and 16-mixed
# (float16 autocast needs a gradient scaler, which these plain loops do not have; Lightning's fits keep theirs)
_BF16_MIXED = ("bf16-mixed", "bf16")


def resolve(precision: Any, accelerator: str = "cpu", cpu_flags: list[str] | None = None,
            cuda_bf16: bool | None = None) -> Any:
    """`trainer.precision` as Lightning takes it: `auto` -> bf16-mixed where bfloat16 products are fast (a CPU with
    AMX, `amx_bf16` in `cpu_flags`; a CUDA device that supports bfloat16, `cuda_bf16`), else 32-true (a CPU without
    AMX would emulate bfloat16, slower than float32). Other values are returned as given. `cpu_flags` / `cuda_bf16`
    default to this machine's."""
    if str(precision) != "auto":
        return precision
    if str(accelerator) in ("gpu", "cuda") or (str(accelerator) == "auto" and _cuda()):
        if cuda_bf16 is None:
            import torch

            cuda_bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        return "bf16-mixed" if cuda_bf16 else "32-true"
    if cpu_flags is None:
        from dreamgym_pl.provenance import cpu_flags as read_flags

        cpu_flags = read_flags()
    return "bf16-mixed" if "amx_bf16" in cpu_flags else "32-true"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def run_precision(cfg: Any) -> Any:
    """The run's `trainer.precision`, resolved (`resolve`) for its accelerator on this machine."""
    t = cfg.trainer
    return resolve(t.get("precision", "32-true"), t.get("accelerator", "cpu"))


def autocast_dtype(precision: Any) -> str | None:
    """"bfloat16" for a `trainer.precision` whose fits autocast to bfloat16, else None."""
    return "bfloat16" if str(precision) in _BF16_MIXED else None


def autocast(precision: Any, device_type: str = "cpu") -> Any:
    """A context manager: `torch.autocast(device_type, bfloat16)` for a bf16-mixed `precision`, else a no-op."""
    dt = autocast_dtype(precision)
    if dt is None:
        return nullcontext()
    import torch

    # no weight-cast cache: it keeps each weight's first bfloat16 copy for the whole context, so a training loop run
    # inside one context (the copy warm start) would go on using the weights of its first step (tests/test_precision.py)
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dt), cache_enabled=False)


def device_of(model: Any) -> str:
    """"cuda" or "cpu": the device type of `model`'s first parameter (an autocast's device_type)."""
    try:
        return "cuda" if next(model.parameters()).device.type == "cuda" else "cpu"
    except (StopIteration, AttributeError):
        return "cpu"
