"""Is there anything for RL to find? A policy of a run plays the first N goals of a split greedily (as eval does)
and K times sampled (as RL does); prints greedy success, sample success, pass@k, and the share of goals whose K
samples all fail / all succeed / mix (only mixed groups give success-reward GRPO a gradient), and the same for the
graded score.

    python experiments/headroom.py --run-dir D [--policy sft] [--split val] [--tasks 200] [--samples 8] [overrides]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dreamgym_pl.headroom import headroom, signal_share  # noqa: E402
from dreamgym_pl.models import load_pretrained  # noqa: E402
from dreamgym_pl.rollout.actor import policy_actor  # noqa: E402
from dreamgym_pl.rollout.collector import run_episodes  # noqa: E402
from dreamgym_pl.rollout.engine import HFEngine  # noqa: E402
from dreamgym_pl.stages import Run  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402
from dreamgym_pl.stages.policy import algorithm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--policy", default="sft")
    ap.add_argument("--split", default="val", choices=["train", "val", "test"])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=None, help="default: the run's algo.temperature")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the numbers as JSON")
    args, overrides = ap.parse_known_args()
    d = Path(args.run_dir)
    run = Run(run_config(d, overrides), d)
    tasks = run.env.tasks(args.split)[: args.tasks]
    policy, tok = load_pretrained(d / "checkpoints" / args.policy, run.cfg.model.dtype)
    algo = algorithm(run)
    temp = algo.cfg.temperature if args.temperature is None else args.temperature
    engine = HFEngine(policy, tok, micro_batch=64)
    torch.manual_seed(args.seed)
    greedy = run_episodes(run.env, tasks, policy_actor(engine, run.prompt_cfg, run.env, 0.0, algo.cfg.max_new_tokens,
                                                       algo.cfg.top_p), batch_size=64)
    sampled = run_episodes(run.env, [t for t in tasks for _ in range(args.samples)],
                           policy_actor(engine, run.prompt_cfg, run.env, temp, algo.cfg.max_new_tokens, algo.cfg.top_p),
                           batch_size=64)
    k = args.samples
    succ = [[int(t.success) for t in sampled[i * k:(i + 1) * k]] for i in range(len(tasks))]
    score = [[t.final_reward for t in sampled[i * k:(i + 1) * k]] for i in range(len(tasks))]
    out = headroom(succ, sorted({1, 2, 4, k}))
    out["greedy_success"] = sum(t.success for t in greedy) / len(greedy)
    out["greedy_score"] = sum(t.final_reward for t in greedy) / len(greedy)
    out["sample_score"] = sum(map(sum, score)) / (len(tasks) * k)
    out["best_of_k_score"] = sum(max(s) for s in score) / len(tasks)
    out["score_mixed"] = signal_share(score)
    out["greedy_fail_pass@k"] = (sum(1 for g, s in zip(greedy, succ) if not g.success and sum(s) > 0)
                                 / max(1, sum(1 for g in greedy if not g.success)))
    out["temperature"] = temp
    print(f"{args.policy} on {len(tasks)} {args.split} goals, {k} samples each at temperature {temp}:")
    for key, v in out.items():
        print(f"  {key:22s} {v:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
