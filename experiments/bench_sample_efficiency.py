"""Sample efficiency in the shape of the paper's Tables 1-2, measured in one run.

From the same SFT start (per seed), train and evaluate on the fixed test goals:
  real-GRPO   real-env GRPO with budget B real transitions
  DreamGym    synthetic RL only (0 real transitions after the offline data)
  S2R         DreamGym + real-env GRPO with at most 0.1*B real transitions
  ablations of DreamGym: no replay retrieval (replay.k=0), no reasoning, no task generation (lambda=0)
Each variant copies the seed's SFT run directory and resumes from it, so all start from identical weights.

    python experiments/bench_sample_efficiency.py --seeds 0 1 2 --budget 6000 --out outputs/bench_se
    python experiments/bench_sample_efficiency.py --quick          # one seed, small budgets (smoke run)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hydra import compose, initialize_config_dir  # noqa: E402

from dreamgym_pl.pipeline import run_pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def variants(budget: int, synth: int) -> dict[str, list[str]]:
    s2r_budget = budget // 10
    exp = ["stages=[collect,sft,experience,synthetic_rl,eval]", f"synthetic_rl.synthetic_budget={synth}"]
    return {
        "real-GRPO": ["stages=[collect,sft,rl,eval]", f"rl.real_budget={budget}"],
        "DreamGym": exp,
        "DreamGym-S2R": ["stages=[collect,sft,experience,synthetic_rl,s2r,eval]", f"synthetic_rl.synthetic_budget={synth}",
                         f"s2r.real_budget={s2r_budget}"],
        "DreamGym w/o replay": exp + ["replay.k=0"],
        "DreamGym w/o reasoning": exp + ["experience.reasoning=false"],
        "DreamGym w/o task generation": exp + ["curriculum.lambda_=0"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--budget", type=int, default=6000, help="B: real transitions of real-env GRPO")
    ap.add_argument("--synthetic", type=int, default=4000, help="synthetic transitions of DreamGym's RL")
    ap.add_argument("--out", default="outputs/bench_sample_efficiency")
    ap.add_argument("--only", nargs="*", default=None, help="run only these variants")
    ap.add_argument("--quick", action="store_true", help="one seed, small budgets")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.budget, args.synthetic = [0], 1200, 800
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = ["env=webshop_tiny", "eval.num_goals=100", *args.overrides]
    results: dict[str, list[dict]] = {}
    for seed in args.seeds:
        start = out / f"seed{seed}" / "sft_start"
        if not (start / "stages.json").exists() or "sft" not in json.loads((start / "stages.json").read_text())["completed"]:
            run_pipeline(cfg(base + [f"seed={seed}", "stages=[collect,sft]", "resume=true"]), start)
        for name, ov in variants(args.budget, args.synthetic).items():
            if args.only and name not in args.only:
                continue
            d = out / f"seed{seed}" / name.replace(" ", "_").replace("/", "")
            if not d.exists():
                shutil.copytree(start, d, ignore=shutil.ignore_patterns("tb"))
            t0 = time.perf_counter()
            m = run_pipeline(cfg(base + [f"seed={seed}", "resume=true", *ov]), d)
            m = dict(m, wall_s=time.perf_counter() - t0)
            results.setdefault(name, []).append(m)
            (out / "results.json").write_text(json.dumps(results, indent=1))
            print(f"[seed {seed}] {name}: success {m['eval/success_rate']:.3f}", flush=True)
    table(results, out)


def _ms(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{100 * xs[0]:.1f}"
    return f"{100 * statistics.mean(xs):.1f} ± {100 * statistics.stdev(xs):.1f}"


def table(results: dict[str, list[dict]], out: Path) -> None:
    sft = [r["sft/test_success_rate"] for rs in results.values() for r in rs[:1]]
    lines = ["| method | real transitions (RL) | synthetic transitions | test success % | test score % |",
             "|---|---|---|---|---|"]
    if sft:
        lines.append(f"| SFT start | 0 | 0 | {_ms(sft[:1] if len(sft) == 1 else sft)} | |")
    for name, rs in results.items():
        real = statistics.mean(r.get("rl/real_transitions", 0) + r.get("s2r/real_transitions", 0) for r in rs)
        syn = statistics.mean(r.get("budget/synthetic_transitions", 0) for r in rs)
        lines.append(f"| {name} | {real:,.0f} | {syn:,.0f} | {_ms([r['eval/success_rate'] for r in rs])} | "
                     f"{_ms([r['eval/mean_score'] for r in rs])} |")
    text = "\n".join(lines)
    print(text)
    (out / "table.md").write_text(text + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for name, rs in results.items():
            real = [r.get("rl/real_transitions", 0) + r.get("s2r/real_transitions", 0) for r in rs]
            ax.scatter(real, [r["eval/success_rate"] for r in rs], label=name)
        ax.set(xlabel="real transitions consumed in RL", ylabel="test success rate", title="success vs real data")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "success_vs_real.png", dpi=100)
        plt.close(fig)
    except Exception as e:  # plotting must not lose the table
        print(f"plot failed: {e}")


if __name__ == "__main__":
    main()
