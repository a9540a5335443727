"""Method B against method A over the same goals and seeds: the mean difference of success (or score) with a 95%
paired-bootstrap interval (goals and seeds resampled; `dreamgym_pl/outcomes.py`), from the runs' eval stages
(`<run dir>/eval/<split>_outcomes.jsonl`). Runs pair by their `seed` (config.yaml); one run on a side (a
deterministic start such as SFT) pairs with every run of the other. Each pair's flips are printed too: on how many
goals B is better and worse than A (`outcomes.flips`), how much of the behaviour changed beneath the mean.

    python experiments/compare_runs.py --a SFT_DIR --b RL_SEED0 RL_SEED1 RL_SEED2 [--split test] [--key success]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omegaconf import OmegaConf  # noqa: E402

from dreamgym_pl.outcomes import common_goals, flips, paired_bootstrap, read_outcomes  # noqa: E402
from dreamgym_pl.provenance import differences, read_records, summarise  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", nargs="+", required=True, type=Path, help="run directories of method A (the baseline)")
    ap.add_argument("--b", nargs="+", required=True, type=Path, help="run directories of method B")
    ap.add_argument("--split", default="test")
    ap.add_argument("--key", default="success", choices=["success", "score"])
    ap.add_argument("--n-boot", type=int, default=2000)
    args = ap.parse_args()
    a, b = runs_by_seed(args.a, args.split, args.key), runs_by_seed(args.b, args.split, args.key)
    if len(a) > 1 and len(b) > 1 and list(a) != list(b):
        sys.exit(f"runs pair by seed: A has seeds {list(a)}, B has {list(b)}")
    ra, rb = list(a.values()), list(b.values())
    mean, lo, hi = paired_bootstrap(ra, rb, args.n_boot)
    goals = common_goals(ra + rb)
    for name, runs in (("A", a), ("B", b)):
        print(f"{name}: " + ", ".join(f"seed {s} {sum(r[g] for g in goals) / len(goals):.3f}" for s, r in runs.items())
              + f" ({args.key} over the {len(goals)} common goals)")
    for sa, sb in seed_pairs(list(a), list(b)):
        up, down, n = flips(a[sa], b[sb], goals)
        # the seed of the side with several runs (a single run is a start paired with each); both single: both
        name = f"seed {sb}" if len(b) > 1 else f"seed {sa}" if len(a) > 1 or sa == sb else f"seed {sa} vs {sb}"
        print(f"{name}: B better on {up} goals, worse on {down}, of {n} ({(up + down) / n:.2f} of them differ)")
    verdict = "above 0" if lo > 0 else "below 0" if hi < 0 else "contains 0: not shown"
    print(f"B - A over {len(goals)} goals x {max(len(a), len(b))} seeds: {mean:+.4f} "
          f"(95% paired-bootstrap CI {lo:+.4f} .. {hi:+.4f}; {verdict})")
    for line in environment_notes(list(args.a) + list(args.b)):
        print(line)


def environment_notes(dirs: list[Path]) -> list[str]:
    """Where the runs' `environment.jsonl` records differ (packages, CPU, threads, commit): numbers made on
    different installs or machines may differ for that reason alone. Runs without a record are named."""
    recs = {str(d): read_records(d) for d in dirs}
    missing = [d for d, r in recs.items() if not r]
    lines = [f"note: no environment.jsonl (made before it existed): {', '.join(missing)}"] if missing else []
    diff = differences({d: summarise(r) for d, r in recs.items() if r})
    for field, values in diff.items():
        lines.append(f"note: runs differ in {field}: " + "; ".join(f"{d}={v}" for d, v in values.items()))
    return lines


def seed_pairs(a: list[int], b: list[int]) -> list[tuple[int, int]]:
    """The (A seed, B seed) pairs compared: equal seeds, or a single run on one side with each run of the other."""
    if len(a) == 1:
        return [(a[0], s) for s in b]
    if len(b) == 1:
        return [(s, b[0]) for s in a]
    return list(zip(a, b))


def runs_by_seed(dirs: list[Path], split: str, key: str) -> dict[int, dict[str, float]]:
    """seed (from each run's config.yaml) -> the run's per-goal outcomes, in seed order; a repeated seed fails."""
    out: dict[int, dict[str, float]] = {}
    for d in dirs:
        seed = int(OmegaConf.load(d / "config.yaml").get("seed", 0))
        if seed in out:
            sys.exit(f"{d}: seed {seed} given twice on one side")
        out[seed] = read_outcomes(d / "eval" / f"{split}_outcomes.jsonl", key)
    return dict(sorted(out.items()))

if __name__ == "__main__":
    main()
