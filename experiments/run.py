"""Entry point: compose the Hydra config and run the pipeline in the run directory.

    python experiments/run.py conf=webshop_grpo
    python experiments/run.py env=webshop stages=[eval] eval.agent=oracle hydra.run.dir=outputs/oracle
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dreamgym_pl.config import ConfigError  # noqa: E402
from dreamgym_pl.pipeline import run_pipeline  # noqa: E402
from dreamgym_pl.summary import run_summary  # noqa: E402

log = logging.getLogger("dreamgym_pl")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_dir = HydraConfig.get().runtime.output_dir
    try:
        metrics = run_pipeline(cfg, run_dir)
    except ConfigError as e:
        log.error("config error: %s", e)
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    log.info("metrics: %s", {k: round(v, 4) for k, v in sorted(metrics.items())})
    print(run_summary(metrics, list(cfg.stages)))
    print(f"run directory: {run_dir}")


if __name__ == "__main__":
    main()
