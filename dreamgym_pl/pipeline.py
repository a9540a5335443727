"""The pipeline: validate the config, then run the configured stages in order in one run directory, skipping
completed ones on resume. Stages live in `dreamgym_pl/stages/`, the run directory's files in `run.py`."""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from dreamgym_pl import config as config_checks
from dreamgym_pl import dist, provenance
from dreamgym_pl.precision import run_precision
from dreamgym_pl.stages import STAGES, Run
from dreamgym_pl.stages.resume import seed_stage

log = logging.getLogger("dreamgym_pl")


def expected_world(trainer: DictConfig) -> int | None:
    """The number of processes the trainer config asks for (devices x num_nodes), None when `devices` is not a
    count (`auto`, -1, a list of ids)."""
    devices, nodes = trainer.devices, trainer.num_nodes
    if isinstance(devices, bool) or not isinstance(devices, int) or not isinstance(nodes, int) or devices < 1:
        return None  # -1 is "all devices": Lightning counts them
    return devices * nodes


def run_pipeline(cfg: DictConfig, run_dir: str | Path, callbacks: list | None = None) -> dict[str, float]:
    """Validate the config, then run each requested stage not already completed (with resume=true).
    `callbacks`: extra Lightning callbacks attached to every training stage's Trainer."""
    config_checks.validate(cfg, run_dir)
    dist.init_from_env(str(cfg.trainer.accelerator), expected_world(cfg.trainer))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    run = Run(cfg, run_dir, callbacks)
    if dist.is_main():  # the config of the latest invocation, resolved (benchmarks and tools reload it)
        (run.dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        provenance.append_record(run.dir, provenance.environment_record(  # what this invocation ran on
            stages=list(cfg.stages), resume=bool(cfg.resume), precision=run_precision(cfg)))
    for stage in cfg.stages:
        if cfg.resume and stage in run.state["completed"]:
            log.info("stage %s: already completed, skipped (resume)", stage)
            continue
        log.info("stage %s: start", stage)
        seed_stage(cfg.seed, stage)
        t0 = time.perf_counter()
        STAGES[stage](run)
        dist.barrier()  # every rank finishes a stage (and rank 0 its files) before the next one starts
        run.record({f"{stage}/seconds": time.perf_counter() - t0})
        log.info("stage %s: done in %.1f s", stage, time.perf_counter() - t0)
    return run.metrics
