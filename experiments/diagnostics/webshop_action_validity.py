"""Which of the policy's WebShop actions each env accepts: the run's policy, sampled as in RL, plays N unseen train
tasks R times in the real env and in the synthetic env (the run's experience model, replay buffer, outcome model and
rules; trailing key=value overrides change them, e.g. `experience.invalid_action=model experience.ending_rules=true`).
Printed per env: success, steps, and per kind of action (a search, a click on a product of a results page, on an
option value the instruction asks for, buy now, page navigation, any other click) how many were taken and how many
the env called invalid (the real env: not offered; the synthetic env: not in the predicted page's list, handled by
`experience.invalid_action`).

    python experiments/diagnostics/webshop_action_validity.py --run-dir D [--policy sft] [--tasks 64] [--rollouts-per-task 4]
        [--seed 0] [key=value ...]
"""

from __future__ import annotations

import argparse
import collections
import logging
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dreamgym_pl.envs.webshop.ending_rules import wanted_options  # noqa: E402
from dreamgym_pl.models import load_pretrained  # noqa: E402
from dreamgym_pl.rollout.actor import policy_actor  # noqa: E402
from dreamgym_pl.rollout.collector import run_episodes  # noqa: E402
from dreamgym_pl.rollout.engine import HFEngine  # noqa: E402
from dreamgym_pl.stages import Run  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402
from dreamgym_pl.stages.experience import load_replay, unseen_train_tasks  # noqa: E402
from dreamgym_pl.stages.policy import algorithm  # noqa: E402
from dreamgym_pl.stages.synthetic_rl import make_synthetic_env, stored_starts  # noqa: E402

NAVIGATION = {"<prev", "next>", "backtosearch", "description", "features", "reviews"}


def squash(text: str) -> str:
    return "".join(text.lower().split())


def action_kind(instruction: str, page: str, action: str) -> str:
    """`<what> on <page>`: what a WebShop action is (search, product, asked option, buy, navigation, other click,
    other) and the kind of page it was taken on (search, results, item, other)."""
    p, a = squash(page), squash(action)
    where = "results" if "totalresults" in p else "item" if "buynow" in p else "search" if p.endswith("search") else "other"
    target = a[len("click["):-1] if a.startswith("click[") and a.endswith("]") else None
    if a.startswith("search["):
        what = "search"
    elif target is None:
        what = "other"
    elif target == "buynow":
        what = "buy"
    elif target in {squash(o) for o in wanted_options(instruction)}:
        what = "asked option"
    elif target in NAVIGATION:
        what = "navigation"
    elif where == "results":
        what = "product"
    else:
        what = "other click"
    return f"{what} on {where}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--policy", default="sft")
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--rollouts-per-task", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args, overrides = ap.parse_known_args()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    d = Path(args.run_dir)
    run = Run(run_config(d, overrides), d)
    policy, tok = load_pretrained(d / "checkpoints" / args.policy, run.cfg.model.dtype)
    algo = algorithm(run)
    pool = unseen_train_tasks(run)
    tasks = random.Random(args.seed).sample(pool, min(args.tasks, len(pool)))
    episodes = [t for t in tasks for _ in range(args.rollouts_per_task)]
    actor = policy_actor(HFEngine(policy, tok, micro_batch=64), run.prompt_cfg, run.env, algo.cfg.temperature,
                         algo.cfg.max_new_tokens, algo.cfg.top_p)
    senv = make_synthetic_env(run, load_replay(run), stored_starts(run))
    senv.enrich = False  # a measurement: the buffer stays as the run left it
    e = run.cfg.experience
    print(f"policy {args.policy}; experience.invalid_action={e.invalid_action}, "
          f"experience.ending_rules={e.ending_rules}, experience.outcome_model={e.outcome_model}")
    for name, env in (("real", run.env), ("synthetic", senv)):
        torch.manual_seed(args.seed)
        trajs = run_episodes(env, episodes, actor, batch_size=64)
        taken, invalid = collections.Counter(), collections.Counter()
        for tr in trajs:
            for t in tr.transitions:
                k = action_kind(t.task.instruction, t.state.text, t.action)
                taken[k] += 1
                invalid[k] += bool(t.info.get("invalid"))
        steps, bad = sum(taken.values()), sum(invalid.values())
        wins = sum(bool(tr.transitions and tr.transitions[-1].info.get("success")) for tr in trajs)
        print(f"{name} env: {len(trajs)} episodes, success {wins / len(trajs):.3f}, {steps} steps, "
              f"invalid {bad} ({bad / max(1, steps):.3f})")
        for k, v in taken.most_common():
            print(f"  {k:26s} {v:5d} taken, {invalid[k]:4d} invalid ({invalid[k] / v:.2f})")


if __name__ == "__main__":
    main()
