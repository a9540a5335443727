"""Train the outcome model (experience/outcome.py) of a run whose experience stage predates it, or again with other
settings: the endings of the same training split as the experience stage's (the offline data, held-out tasks
split off by `experience.val_fraction` and the seed) -> D/checkpoints/outcome, and prints
its verdicts on the held-out endings and, with `--policy-episodes N`, on N sampled episodes of the run's SFT policy
on train tasks the offline data never touched (real transitions; nothing is written to metrics.json).

    python experiments/diagnostics/add_outcome_model.py --run-dir D [--policy-episodes 400] [experience.outcome_steps=200 ...]
        [experience.outcome_agents.near_miss=800]   (a run made before the key existed has none)

Then `resume=true` runs of the later stages, `bench_fidelity.py` and `webshop_failed_purchases.py --judge` use it.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dreamgym_pl.experience.module import split_by_task  # noqa: E402
from dreamgym_pl.stages import Run  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402
from dreamgym_pl.stages.experience import sampled_policy, unseen_train_tasks  # noqa: E402
from dreamgym_pl.stages.outcome_model import report, train_outcome  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--policy-episodes", type=int, default=0, help="SFT-policy episodes on unseen train tasks to judge")
    ap.add_argument("--seed", type=int, default=0)
    args, overrides = ap.parse_known_args()
    d = Path(args.run_dir)
    cfg = run_config(d, [*overrides, "experience.outcome_model=minilm"])
    run = Run(cfg, d)
    run.cfg.resume = False  # trained again, never loaded
    trajs = run.offline_trajectories()
    train, held_out = split_by_task(trajs, cfg.experience.val_fraction, cfg.seed)
    model, res = train_outcome(run, train, held_out)
    for k, v in sorted(res.items()):
        print(f"{k}: {v:.3f}")
    if args.policy_episodes > 0:
        from dreamgym_pl.rollout.collector import run_episodes

        run.state["policy"] = "checkpoints/sft"
        tasks = random.Random(args.seed).sample(unseen_train_tasks(run), args.policy_episodes)
        torch.manual_seed(args.seed)
        real = run_episodes(run.env, tasks, sampled_policy(run), batch_size=64, source="policy")
        for k, v in sorted(report(model, real, "sft_policy").items()):
            print(f"{k}: {v:.3f}")


if __name__ == "__main__":
    main()
