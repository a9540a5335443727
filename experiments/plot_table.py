"""The benchmark table (paper Tables 1-2 in shape) from run directories: each row's per-seed success, its mean and
its difference to a base row (and to any other row asked for) with a 95% paired-bootstrap interval over goals and
seeds (`dreamgym_pl/outcomes.py`, as `compare_runs.py`), as a markdown table and a PNG.

    python experiments/plot_table.py --split test --base SFT --out docs/results/table \\
        --row SFT SFT_0 SFT_1 SFT_2 --row "real GRPO" GRPO_0 GRPO_1 GRPO_2 --row DreamGym DG_0 DG_1 DG_2 \\
        --versus "DreamGym=real GRPO"

Writes <out>/table_<split>.md and <out>/table_<split>.png; prints the markdown.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compare_runs import runs_by_seed  # noqa: E402

from dreamgym_pl.outcomes import common_goals, paired_bootstrap  # noqa: E402

Runs = dict[int, dict[str, float]]  # seed -> task id -> success


def row_means(runs: Runs, goals: Sequence[str]) -> list[float]:
    """Each seed's mean over `goals`, in seed order."""
    return [sum(r[g] for g in goals) / len(goals) for r in runs.values()]


def difference(a: Runs, b: Runs, n_boot: int) -> tuple[float, float, float]:
    """(B - A, low, high): the paired bootstrap of `compare_runs.py`; both sides pair by seed."""
    if len(a) > 1 and len(b) > 1 and list(a) != list(b):
        raise ValueError(f"runs pair by seed: {list(a)} vs {list(b)}")
    return paired_bootstrap(list(a.values()), list(b.values()), n_boot)


def fmt_diff(d: tuple[float, float, float]) -> str:
    mean, lo, hi = (100 * x for x in d)
    return f"{mean:+.1f} ({lo:+.1f} .. {hi:+.1f})"


def table(rows: dict[str, Runs], base: str, versus: Sequence[tuple[str, str]], n_boot: int) -> tuple[str, list[dict]]:
    """The markdown table and one record per row: name, per-seed means, mean, difference to `base` (None for the
    base itself). `versus` adds lines "B - A" below the table. Means are over the goals every run of every row holds."""
    goals = common_goals([r for runs in rows.values() for r in runs.values()])
    if not goals:
        raise ValueError("no goal was evaluated by every run")
    seeds = sorted({s for runs in rows.values() for s in runs})
    head = "| row | " + " | ".join(f"seed {s}" for s in seeds) + f" | mean | - {base} (95% CI), points |"
    lines = [head, "|" + "---|" * (len(seeds) + 3)]
    records = []
    for name, runs in rows.items():
        per = dict(zip(runs, row_means(runs, goals)))
        d = None if name == base else difference(rows[base], runs, n_boot)
        records.append({"name": name, "seeds": per, "mean": sum(per.values()) / len(per), "diff": d})
        cells = [f"{per[s]:.3f}" if s in per else "" for s in seeds]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {records[-1]['mean']:.3f} | "
                     + ("-" if d is None else fmt_diff(d)) + " |")
    for b, a in versus:
        lines.append(f"\n{b} - {a}: {fmt_diff(difference(rows[a], rows[b], n_boot))} points")
    lines.append(f"\n({len(goals)} goals x {len(seeds)} seeds; success, greedy)")
    return "\n".join(lines), records


def plot(records: list[dict], base: str, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in records]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 0.45 * len(names) + 1.8), sharey=True)
    for i, r in enumerate(records):
        ax.barh(i, r["mean"], color="tab:blue", alpha=0.5)
        ax.plot(list(r["seeds"].values()), [i] * len(r["seeds"]), "k.", ms=6)
        if r["diff"] is not None:
            m, lo, hi = r["diff"]
            bx.errorbar(100 * m, i, xerr=[[100 * (m - lo)], [100 * (hi - m)]], fmt="o", capsize=3,
                        color="tab:green" if lo > 0 else "tab:red" if hi < 0 else "tab:gray")
    ax.set(yticks=range(len(names)), yticklabels=names, xlabel="success (bar: mean; dots: seeds)", title=title)
    ax.invert_yaxis()
    bx.axvline(0, color="k", lw=0.8)
    bx.set(xlabel=f"difference to {base}, points (95% paired bootstrap)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--row", nargs="+", action="append", required=True, metavar=("NAME", "RUN_DIR"),
                    help="a row's name, then its run directories (one per seed)")
    ap.add_argument("--base", required=True, help="the row every other is compared with (e.g. SFT)")
    ap.add_argument("--versus", action="append", default=[], help='"B=A": a further difference B - A')
    ap.add_argument("--split", default="test")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    rows: dict[str, Runs] = {}
    for name, *dirs in args.row:
        if not dirs:
            ap.error(f"--row {name}: no run directory")
        rows[name] = runs_by_seed([Path(d) for d in dirs], args.split, "success")
    if args.base not in rows:
        ap.error(f"--base {args.base}: not a row ({list(rows)})")
    versus = []
    for v in args.versus:
        b, _, a = v.partition("=")
        if b not in rows or a not in rows:
            ap.error(f"--versus {v}: both sides must be rows ({list(rows)})")
        versus.append((b, a))
    md, records = table(rows, args.base, versus, args.n_boot)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"table_{args.split}.md").write_text(md + "\n")
    plot(records, args.base, f"{args.split} success", args.out / f"table_{args.split}.png")
    print(md)


if __name__ == "__main__":
    main()
