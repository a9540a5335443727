"""The pipeline's stages, one module each; `STAGES` is the registry that config validation and the pipeline
read. A stage is `run_stage(run: Run) -> None`: it records its metrics and marks itself complete."""

from __future__ import annotations

from typing import Callable

from dreamgym_pl.stages import collect, dpo, eval, experience, rl, s2r, sft, synthetic_rl
from dreamgym_pl.stages.context import Run

STAGES: dict[str, Callable[[Run], None]] = {
    "collect": collect.run_stage,
    "sft": sft.run_stage,
    "dpo": dpo.run_stage,
    "rl": rl.run_stage,
    "experience": experience.run_stage,
    "synthetic_rl": synthetic_rl.run_stage,
    "s2r": s2r.run_stage,
    "eval": eval.run_stage,
}

__all__ = ["STAGES", "Run"]
