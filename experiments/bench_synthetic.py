"""Synthetic-environment throughput: synthetic transitions per second, the share of step time spent in
retrieval, prompt building and parsing (beside generation), and real-env steps per second for scale.

Uses a run directory's trained experience model and replay buffer (`--run-dir D`, after the experience
stage), driving the synthetic env with the run's SFT policy on train goals.

    python experiments/bench_synthetic.py --run-dir outputs/<run> [--episodes 64] [--batch 64]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dreamgym_pl.stages.context import run_config  # noqa: E402

from dreamgym_pl.models import load_pretrained  # noqa: E402
from dreamgym_pl.stages import Run  # noqa: E402
from dreamgym_pl.stages.experience import load_replay  # noqa: E402
from dreamgym_pl.stages.synthetic_rl import make_synthetic_env, stored_starts  # noqa: E402
from dreamgym_pl.rollout.actor import policy_actor  # noqa: E402
from dreamgym_pl.rollout.collector import run_episodes  # noqa: E402
from dreamgym_pl.rollout.engine import HFEngine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--caches", nargs="+", default=None, choices=["dynamic", "static", "filled"],
                    help="measure only the synthetic episodes, once per generation KV cache (engine.cache), in this "
                         "order, each from the same seed: the ratio of the first to each other")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.caches:
        return compare_caches(args)
    d = Path(args.run_dir)
    run = Run(run_config(d), d)
    buffer = load_replay(run)
    senv = make_synthetic_env(run, buffer, stored_starts(run))
    senv.enrich = False
    policy, tok = load_pretrained(d / "checkpoints" / "sft")
    actor = policy_actor(HFEngine(policy, tok), run.prompt_cfg, run.env, temperature=1.0, max_new_tokens=16)
    tasks = run.env.tasks("train")[: args.episodes]
    t0 = time.perf_counter()
    syn = run_episodes(senv, tasks, actor, batch_size=args.batch, source="synthetic")
    syn_s = time.perf_counter() - t0
    n_syn = sum(len(t.transitions) for t in syn)
    st = senv.stats
    env_s = st["retrieval_s"] + st["prompt_s"] + st["generate_s"] + st["parse_s"]
    t0 = time.perf_counter()
    real = run_episodes(run.env, tasks, actor, batch_size=args.batch, source="real")
    real_s = time.perf_counter() - t0
    n_real = sum(len(t.transitions) for t in real)
    print(f"replay entries: {len(buffer)}; experience prompts k={senv.fmt.k}, history={senv.fmt.history}")
    print("| measure | value |")
    print("|---|---|")
    print(f"| synthetic transitions/s (policy + experience model) | {n_syn / syn_s:.1f} |")
    print(f"| real transitions/s (policy + real env `{run.cfg.env.name}`) | {n_real / real_s:.1f} |")
    print(f"| synthetic env step time: generation | {st['generate_s']:.2f} s |")
    for k in ("retrieval_s", "prompt_s", "parse_s"):
        print(f"| synthetic env step time: {k[:-2]} (share of generation) | {st[k]:.3f} s ({100 * st[k] / st['generate_s']:.1f}%) |")
    over = st["retrieval_s"] + st["prompt_s"] + st["parse_s"]
    print(f"| overhead beside generation, total | {100 * over / st['generate_s']:.1f}% of generation, "
          f"{100 * over / env_s:.1f}% of the env step |")
    print(f"| invalid (unparseable) outputs | {st['invalid_outputs']} of {st['steps']} steps |")
    if hasattr(run.env, "close"):  # browser envs hold worker processes
        run.env.close()


def compare_caches(args: argparse.Namespace) -> None:
    """Synthetic transitions per second and generation seconds of the same episodes (same tasks, same seed) with each
    KV cache of `args.caches`, the policy and the experience model generating with it."""
    import torch

    d = Path(args.run_dir)
    res = []
    for cache in args.caches:
        run = Run(run_config(d, [f"engine.cache={cache}"]), d)
        senv = make_synthetic_env(run, load_replay(run), stored_starts(run))
        senv.enrich = False
        policy, tok = load_pretrained(d / "checkpoints" / "sft")
        actor = policy_actor(HFEngine(policy, tok, cache=cache), run.prompt_cfg, run.env, temperature=1.0,
                             max_new_tokens=16)
        torch.manual_seed(args.seed)
        t0 = time.perf_counter()
        syn = run_episodes(senv, run.env.tasks("train")[: args.episodes], actor, batch_size=args.batch,
                           source="synthetic")
        secs = time.perf_counter() - t0
        n = sum(len(t.transitions) for t in syn)
        res.append(secs)
        print(f"{cache:8s} {n} synthetic transitions in {secs:.1f} s ({n / secs:.1f}/s), of which generation by the "
              f"experience model {senv.stats['generate_s']:.1f} s; success {sum(t.success for t in syn) / len(syn):.3f}")
    for i, c in enumerate(args.caches[1:], 1):
        print(f"ratio {args.caches[0]} (first) / {c} (run {i + 1}), seconds for the episodes: {res[0] / res[i]:.2f}x")


if __name__ == "__main__":
    main()
