"""Method B against method A over the same goals and seeds: the mean difference of success (or score) with a 95%
paired-bootstrap interval (goals and seeds resampled; `dreamgym_pl/outcomes.py`), from the runs' eval stages
(`<run dir>/eval/<split>_outcomes.jsonl`). Runs pair by position; one run on a side (a deterministic start such
as SFT) pairs with every run of the other.

    python experiments/compare_runs.py --a SFT_DIR --b RL_SEED0 RL_SEED1 RL_SEED2 [--split test] [--key success]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dreamgym_pl.outcomes import paired_bootstrap, read_outcomes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", nargs="+", required=True, type=Path, help="run directories of method A (the baseline)")
    ap.add_argument("--b", nargs="+", required=True, type=Path, help="run directories of method B")
    ap.add_argument("--split", default="test")
    ap.add_argument("--key", default="success", choices=["success", "score"])
    ap.add_argument("--n-boot", type=int, default=2000)
    args = ap.parse_args()
    a = [read_outcomes(d / "eval" / f"{args.split}_outcomes.jsonl", args.key) for d in args.a]
    b = [read_outcomes(d / "eval" / f"{args.split}_outcomes.jsonl", args.key) for d in args.b]
    mean, lo, hi = paired_bootstrap(a, b, args.n_boot)
    goals = len(set.intersection(*(set(r) for r in a + b)))
    for name, runs in (("A", a), ("B", b)):
        print(f"{name}: " + ", ".join(f"{sum(r.values()) / len(r):.3f}" for r in runs) + f" ({args.key}, per run)")
    verdict = "above 0" if lo > 0 else "below 0" if hi < 0 else "contains 0: not shown"
    print(f"B - A over {goals} goals x {max(len(a), len(b))} seeds: {mean:+.4f} (95% CI {lo:+.4f} .. {hi:+.4f}; {verdict})")


if __name__ == "__main__":
    main()
