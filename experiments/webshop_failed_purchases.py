"""Why a run's policy fails its WebShop purchases: the policy (sampled as in RL) plays N unseen train tasks R times
in the real env, and each failed purchase is classified by the reward's parts (`info`: type, attributes,
options, price; a purchase can fail on several).

    python experiments/webshop_failed_purchases.py --run-dir D [--policy sft] [--tasks 100] [--rollouts-per-task 4]
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dreamgym_pl.models import load_pretrained  # noqa: E402
from dreamgym_pl.rollout.actor import policy_actor  # noqa: E402
from dreamgym_pl.rollout.collector import run_episodes  # noqa: E402
from dreamgym_pl.rollout.engine import HFEngine  # noqa: E402
from dreamgym_pl.stages import Run  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402
from dreamgym_pl.stages.experience import unseen_train_tasks  # noqa: E402
from dreamgym_pl.stages.policy import algorithm  # noqa: E402


def failed_parts(info: dict) -> list[str]:
    """The reward parts a purchase missed (empty for a success)."""
    parts = []
    if info.get("r_type", 1.0) < 1:
        parts.append("type")
    if info.get("n_attr_match", 0) < info.get("n_attrs", 0):
        parts.append("attributes")
    if info.get("n_option_match", 0) < info.get("n_options", 0):
        parts.append("options")
    if info.get("r_price", 1.0) < 1:
        parts.append("price")
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--policy", default="sft")
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--rollouts-per-task", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args, overrides = ap.parse_known_args()
    d = Path(args.run_dir)
    run = Run(run_config(d, overrides), d)
    policy, tok = load_pretrained(d / "checkpoints" / args.policy, run.cfg.model.get("dtype", "float32"))
    algo = algorithm(run)
    tasks = random.Random(args.seed).sample(unseen_train_tasks(run), args.tasks)
    actor = policy_actor(HFEngine(policy, tok, micro_batch=64), run.prompt_cfg, run.env, algo.cfg.temperature,
                         algo.cfg.max_new_tokens, algo.cfg.top_p)
    torch.manual_seed(args.seed)
    real = run_episodes(run.env, [t for t in tasks for _ in range(args.rollouts_per_task)], actor, batch_size=64)
    combos, parts = collections.Counter(), collections.Counter()
    for t in real:
        info = t.transitions[-1].info if t.transitions else {}
        if "r_type" not in info:
            combos["no purchase"] += 1
        elif info.get("success"):
            combos["success"] += 1
        else:
            missed = failed_parts(info)
            combos["failed: " + " + ".join(missed)] += 1
            parts.update(missed)
    print(f"{len(real)} episodes of policy {args.policy}")
    for k, v in combos.most_common():
        print(f"{v:5d}  {k}")
    print("failed purchases missing each part:", dict(parts))


if __name__ == "__main__":
    main()
