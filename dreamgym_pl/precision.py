"""Mixed precision: `trainer.precision` resolved for this machine (`resolve`: `auto`, and Lightning's own conversions),
and the loops that run outside a Lightning fit (the copy warm start, the ending-step training, the experience model's
refreshes, the outcome model, DPO's reference log-probs) under the precision their fit would use (`loop_precision`,
`autocast`); inside a fit's data module, RL's old / reference log-probs and PPO's old values under the fit's own
context (`fit_context`).

Why: on a CPU with AMX (`amx_bf16` in /proc/cpuinfo) bfloat16 matrix products run on the tile unit: the outcome model
(all-MiniLM-L6-v2) trains 1.28x faster a step under bfloat16 autocast (1.55x unsplit), while model=tiny's steps are too small to
gain and run slower (README Results, "Another machine"; experiments/bench_precision.py). Weights, optimiser state and losses
stay float32 ("-mixed").
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

# trainer.precision values that autocast to bfloat16 (after `resolve`); every other value runs the loops without
# autocast: 32/64-true, and bf16/16-true (whole-model dtypes: Lightning converts the module at the fit's setup;
# these loops, run before the fit or beside it, stay float32), and 16-mixed on CUDA (float16 autocast needs a gradient
# scaler, which these plain loops do not have; Lightning's fits keep theirs)
_BF16_MIXED = ("bf16-mixed",)
_HALF_MIXED = ("16-mixed", "16")


def _gpu(accelerator: Any) -> bool:
    """Whether a fit with this `trainer.accelerator` runs on a CUDA device."""
    a = str(accelerator)
    if a == "auto":
        import torch

        return torch.cuda.is_available()
    return a in ("gpu", "cuda")


def resolve(precision: Any, accelerator: str = "cpu", cpu_flags: list[str] | None = None,
            cuda_bf16: bool | None = None) -> Any:
    """`trainer.precision` as the fit runs it. `auto` -> bf16-mixed where the hardware multiplies bfloat16 natively
    (a CPU with AMX, `amx_bf16` in `cpu_flags`; a CUDA device that supports bfloat16, `cuda_bf16`), else 32-true (a
    CPU without AMX would emulate bfloat16, slower than float32). Whether that pays off depends on the model's size
    too: model=tiny runs slower in bfloat16 even with AMX, so the CPU default stays 32-true. Lightning's conversions:
    bf16 -> bf16-mixed, and 16-mixed / 16 on a CPU -> bf16-mixed (Lightning autocasts a CPU fit to bfloat16 there).
    Other values are returned as given. `cpu_flags` / `cuda_bf16` default to this machine's."""
    p = str(precision)
    gpu = _gpu(accelerator)
    if p == "auto":
        if gpu:
            if cuda_bf16 is None:
                import torch

                cuda_bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
            return "bf16-mixed" if cuda_bf16 else "32-true"
        if cpu_flags is None:
            from dreamgym_pl.provenance import cpu_flags as read_flags

            cpu_flags = read_flags()
        return "bf16-mixed" if "amx_bf16" in cpu_flags else "32-true"
    if p == "bf16" or (p in _HALF_MIXED and not gpu):
        return "bf16-mixed"
    return precision


def run_precision(cfg: Any) -> Any:
    """The run's `trainer.precision`, resolved (`resolve`) for its accelerator on this machine: what its fits run."""
    t = cfg.trainer
    return resolve(t.precision, t.accelerator)


def loop_precision(cfg: Any, where: Any) -> Any:
    """The precision of a loop outside the fit on `where` (a model, or a device type: cpu / cuda): the fits' when the
    loop runs on the fit's kind of device, else 32-true (e.g. the copy warm start runs on the CPU before a GPU fit
    moves the model: the GPU's bfloat16 says nothing about the CPU's)."""
    device_type = where if isinstance(where, str) else device_of(where)
    on_gpu = _gpu(cfg.trainer.accelerator)
    return run_precision(cfg) if (device_type == "cuda") == on_gpu else "32-true"


def loop_autocast(cfg: Any, model: Any) -> Any:
    """`autocast` of `loop_precision(cfg, model)` on `model`'s device: a no-grad pass outside the fit, as the fit's."""
    return autocast(loop_precision(cfg, model), device_of(model))


def autocast_dtype(precision: Any) -> str | None:
    """"bfloat16" for a (resolved) `trainer.precision` that autocasts to bfloat16, else None."""
    return "bfloat16" if str(precision) in _BF16_MIXED else None


def autocast(precision: Any, device_type: str = "cpu") -> Any:
    """A context manager: `torch.autocast(device_type, bfloat16)` for a bf16-mixed `precision`, else a no-op."""
    dt = autocast_dtype(precision)
    if dt is None:
        return nullcontext()
    import torch

    # no weight-cast cache (as Lightning's own autocast): with it, a loop run inside one context would go on using the
    # bfloat16 copies of its first step's weights (tests/test_precision.py)
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dt), cache_enabled=False)


def fit_context(trainer: Any) -> Any:
    """The context in which `trainer`'s fit runs a training step's forward (its precision plugin's: an autocast for
    *-mixed, nothing for DeepSpeed, whose engine holds bfloat16 weights itself); a no-op without a trainer."""
    plugin = getattr(trainer, "precision_plugin", None)
    return plugin.forward_context() if plugin is not None else nullcontext()


def device_of(model: Any) -> str:
    """"cuda" or "cpu": the device type of `model`'s first parameter (an autocast's device_type; mps counts as cpu,
    where a CPU autocast changes nothing on it)."""
    try:
        return "cuda" if next(model.parameters()).device.type == "cuda" else "cpu"
    except (StopIteration, AttributeError, TypeError):
        return "cpu"
