"""Run or continue an Optuna sweep over the pipeline.

    python sweeps/run.py sweeps/curriculum.yaml                           # the spec's n_trials
    python sweeps/run.py sweeps/curriculum.yaml --n-trials 20 --out outputs/sweeps/curriculum
    python sweeps/run.py sweeps/rl.yaml --start-from outputs/my_sft_run   # each trial copies a finished start
    python sweeps/run.py sweeps/curriculum.yaml eval.num_goals=200        # extra Hydra overrides for every trial

Stop it at any time (Ctrl-C, kill) and run the same command again: the SQLite study (<out>/study.db) keeps
every finished trial and the sweep goes on until n_trials trials have finished. Look at it with
`tensorboard --logdir <out>` (one directory per trial, parameters as hparams) or
`optuna-dashboard sqlite:///<out>/study.db`; <out>/best.json, trials.md and the PNG plots are rewritten at
the end of every invocation.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hydra import compose, initialize_config_dir  # noqa: E402

from dreamgym_pl.pipeline import run_pipeline  # noqa: E402
from dreamgym_pl.sweep import SweepSpecError, load_spec, run_sweep  # noqa: E402


def compose_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec", help="sweep spec YAML (sweeps/*.yaml)")
    ap.add_argument("--out", help="sweep directory (default outputs/sweeps/<study_name>)")
    ap.add_argument("--n-trials", type=int, help="finished trials to reach (default: the spec's n_trials)")
    ap.add_argument("--storage", help="Optuna storage URL (default sqlite:///<out>/study.db)")
    ap.add_argument("--start-from", help="a run directory each trial copies and resumes (overrides the spec)")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every trial")
    return ap.parse_intermixed_args(argv)  # overrides may follow the options


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        spec = load_spec(args.spec)
    except SweepSpecError as e:
        print(f"sweep spec error: {e}", file=sys.stderr)
        return 2
    if args.start_from:
        spec.start_from = args.start_from
    if spec.start_from and not (Path(spec.start_from) / "stages.json").exists():
        print(f"sweep spec error: start_from: {spec.start_from!r} is not a run directory (no stages.json)",
              file=sys.stderr)
        return 2
    out = Path(args.out or f"outputs/sweeps/{spec.study_name}")
    study = run_sweep(spec, out, compose_cfg, run_pipeline, args.n_trials, args.storage, args.overrides)
    best = (out / "best.json").read_text()
    print((out / "trials.md").read_text())
    print(best)
    print(f"sweep directory: {out}  (tensorboard --logdir {out}; optuna-dashboard {study._storage.url if hasattr(study._storage, 'url') else args.storage or 'sqlite:///' + str(out / 'study.db')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
