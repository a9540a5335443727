"""Environment throughput: built-in WebShop steps per second for the scripted agents.

    python experiments/bench_env.py [--goals 500] [--batch 64]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dreamgym_pl.agents import make_agent  # noqa: E402
from dreamgym_pl.envs import make_vec_env  # noqa: E402
from dreamgym_pl.rollout.collector import episode_stats, run_episodes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--goals", type=int, default=500, help="test goals played per agent")
    ap.add_argument("--batch", type=int, default=64, help="episodes stepped together")
    ap.add_argument("--results-per-page", type=int, default=10)
    args = ap.parse_args()
    t0 = time.perf_counter()
    env = make_vec_env("webshop", results_per_page=args.results_per_page)
    build = time.perf_counter() - t0
    tasks = env.tasks("test")[: args.goals]
    print(f"catalogue + index + goals built in {build:.2f} s")
    print("| agent | episodes | steps | seconds | steps/s | success | mean score |")
    print("|---|---|---|---|---|---|---|")
    for name in ("oracle", "noisy_oracle", "random"):
        t0 = time.perf_counter()
        trajs = run_episodes(env, tasks, make_agent(name, seed=1, env=env), batch_size=args.batch)
        dt = time.perf_counter() - t0
        s = episode_stats(trajs)
        print(f"| {name} | {len(trajs)} | {int(s['transitions'])} | {dt:.2f} | {s['transitions'] / dt:,.0f} | "
              f"{s['success_rate']:.3f} | {s['mean_score']:.3f} |")


if __name__ == "__main__":
    main()
