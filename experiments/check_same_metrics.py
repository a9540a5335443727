"""Behaviour check for refactors: the same small seeded `conf=webshop_s2r` run at two revisions must give the
same metrics.json (timing keys aside).

    python experiments/check_same_metrics.py REV_A [REV_B] [--out DIR] [key=value ...]

REV_B defaults to the working tree; REV_A == REV_B checks that a revision is deterministic. Each revision is checked out with `git worktree` into DIR, run with this
interpreter (one run at a time), and the two metrics.json files are compared key by key; keys measuring time
(`*/seconds`, `*per_s*`, `*overhead_share`) are left out. Exit status 1 when any other key differs. The run is
small but exercises every stage of the preset (collect, sft, experience with the judge, synthetic RL with the
curriculum, s2r, eval) with a policy that learns something; trailing overrides change it. Revisions before
c278ffb refuse `sft.copy_steps`; the sft copy warm start is on by default at c278ffb (1000 steps) and again since
the commit that made `sft.copy_steps=1000 sft.copy_examples=700` the default (README "Results"), off in between:
across those, pass `sft.copy_steps=0` (and `sft.copy_examples=0` where the key exists) to both sides. The small
run scales the presets' demonstrator (`collect.agents.hasty`, since 6867cb8): revisions before it have no hasty agent
and cloned the oracle, so compare them among themselves with an older copy of this script.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["conf=webshop_s2r", "model.hidden_size=64", "model.num_layers=2", "model.num_heads=2",
         "model.intermediate_size=128", "env.num_products=150", "env.num_test=60", "collect.agents.hasty=120",
         "collect.agents.noisy_oracle=60", "collect.agents.random=40", "sft.num_trajectories=100", "sft.max_steps=500",
         "sft.warmup_steps=10", "eval.num_goals=40", "eval.batch_size=40", "eval.curve_every=2", "eval.curve_goals=20",
         "experience.max_transitions=600", "experience.max_steps=150", "experience.warmup_steps=5",
         "experience.judge_steps=30", "experience.max_new_tokens=200", "synthetic_rl.synthetic_budget=150",
         "synthetic_rl.tasks_per_iter=4", "s2r.real_budget=80", "s2r.tasks_per_iter=4", "algo.group_size=4",
         "algo.mini_batch_size=32", "curriculum.train_examples=40", "curriculum.max_words=30", "curriculum.lambda_=0.5",
         "curriculum.min_variance=0.01", "checkpoint_every=1", "trainer.enable_progress_bar=false"]
TIMING = ("seconds", "per_s", "overhead_share")


def differences(a: dict[str, float], b: dict[str, float]) -> list[str]:
    """Keys whose values differ (or exist on one side only), timing keys aside."""
    return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if not any(t in k for t in TIMING) and a.get(k) != b.get(k)]


def run_at(rev: str | None, out: Path, overrides: list[str], side: str) -> dict[str, float]:
    src = ROOT
    if rev is not None:
        src = out / f"src-{rev}"
        if not src.exists():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(src), rev], check=True,
                           capture_output=True)
    run_dir = out / f"run-{side}-{rev or 'worktree'}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run: nothing of an earlier one may be reused
    cmd = [sys.executable, str(src / "experiments" / "run.py"), *SMALL, *overrides, f"hydra.run.dir={run_dir}"]
    p = subprocess.run(cmd, cwd=src, capture_output=True, text=True)  # run.py puts its own checkout first on sys.path
    if p.returncode != 0:
        sys.exit(f"run at {rev or 'the working tree'} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return json.loads((run_dir / "metrics.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rev_a")
    ap.add_argument("rev_b", nargs="?", default=None)
    ap.add_argument("--out", default=None, help="folder for the worktrees and runs (default: a temporary one)")
    args, overrides = ap.parse_known_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="same_metrics_"))
    out.mkdir(parents=True, exist_ok=True)
    a = run_at(args.rev_a, out, overrides, "a")
    b = run_at(args.rev_b, out, overrides, "b")
    diffs = differences(a, b)
    print(f"{len(a)} vs {len(b)} keys; {len(diffs)} differ (timing keys aside); runs in {out}")
    for d in diffs:
        print("  " + d)
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
