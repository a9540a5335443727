"""Sample efficiency in the shape of the paper's Tables 1-2, measured in one run.

One SFT start (collect + SFT, seed 0) and one experience model per ablation are trained once; then, for each
seed, every variant copies its start directory and runs its RL stages with that seed (rollout sampling, task
order, curriculum), so all variants of a seed start from identical weights:
  real-GRPO   real-env GRPO with budget B real transitions
  DreamGym    synthetic RL only (0 real transitions after the offline data)
  S2R         DreamGym (the same seed's run) + real-env GRPO with at most 0.1*B real transitions
  ablations of DreamGym: no replay retrieval (replay.k=0), no reasoning (experience.reasoning=false),
  no task generation (curriculum.lambda_=0; the same experience model as DreamGym)
Each RL stage evaluates the greedy policy on the first `eval.curve_goals` val goals every `eval.curve_every`
iterations (the curves; `eval.curve_split=test` for a test curve) and on `eval.num_goals` test goals at its end
(the table).

    python experiments/bench_sample_efficiency.py --seeds 0 1 2 --budget 6000 --synthetic 2000
    python experiments/bench_sample_efficiency.py --quick          # one seed, small budgets (smoke run)
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hydra import compose, initialize_config_dir  # noqa: E402

from dreamgym_pl.pipeline import run_pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def curve_key(history: list[dict]) -> str:
    """The RL stages' curve key in a history: val/success_rate (eval.curve_split=val) or test/success_rate."""
    return next((k for k in ("val/success_rate", "test/success_rate") if any(k in x for x in history)),
                "val/success_rate")


PRE = "stages=[collect,sft"


def cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


# experience-model starts: name -> overrides (trained once, after the SFT start)
STARTS = {"exp": [], "exp_noreplay": ["replay.k=0"], "exp_noreason": ["experience.reasoning=false"]}


def variants(budget: int, synth: int) -> dict[str, tuple[str, list[str], str]]:
    """name -> (start directory, overrides, stage whose final test metrics are the result)."""
    syn = [PRE + ",experience,synthetic_rl]", f"synthetic_rl.synthetic_budget={synth}"]
    return {
        "real-GRPO": ("sft_start", [PRE + ",rl]", f"rl.real_budget={budget}"], "rl"),
        "DreamGym": ("exp", syn, "synthetic_rl"),
        "DreamGym-S2R": ("DreamGym", [PRE + ",experience,synthetic_rl,s2r]", f"synthetic_rl.synthetic_budget={synth}",
                                      f"s2r.real_budget={budget // 10}"], "s2r"),
        "DreamGym w/o replay": ("exp_noreplay", syn + STARTS["exp_noreplay"], "synthetic_rl"),
        "DreamGym w/o reasoning": ("exp_noreason", syn + STARTS["exp_noreason"], "synthetic_rl"),
        "DreamGym w/o task generation": ("exp", syn + ["curriculum.lambda_=0"], "synthetic_rl"),
    }


def slug(name: str) -> str:
    return name.replace(" ", "_").replace("/", "")


def _copy(src: Path, dst: Path) -> None:
    if not dst.exists():
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("tb"))
        tmp.rename(dst)


def _done(d: Path, stage: str) -> bool:
    f = d / "stages.json"
    return f.exists() and stage in json.loads(f.read_text())["completed"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--budget", type=int, default=6000, help="B: real transitions of real-env GRPO")
    ap.add_argument("--synthetic", type=int, default=2000, help="synthetic transitions of DreamGym's RL")
    ap.add_argument("--out", default="outputs/bench_sample_efficiency")
    ap.add_argument("--only", nargs="*", default=None, help="run only these variants")
    ap.add_argument("--quick", action="store_true", help="one seed, small budgets, short training")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    args = ap.parse_args()
    if args.only:  # `--only A B key=value`: argparse hands trailing overrides to --only; take them back
        args.overrides = [o for o in args.only if "=" in o] + args.overrides
        args.only = [o for o in args.only if "=" not in o]
        unknown = [o for o in args.only if o not in variants(0, 0)]
        if unknown:
            ap.error(f"--only: unknown variant(s) {unknown}; choose from {list(variants(0, 0))}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    extra = []
    if args.quick:
        args.seeds, args.budget, args.synthetic = [0], 600, 300
        extra = ["sft.max_steps=60", "experience.max_steps=60", "collect.agents.oracle=40",
                 "collect.agents.noisy_oracle=40", "collect.agents.random=20", "experience.judge_steps=20"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = ["env=webshop_tiny", "resume=true", *extra, *args.overrides]
    t_start = time.perf_counter()
    start = out / "sft_start"
    if not _done(start, "sft"):
        run_pipeline(cfg(base + ["seed=0", PRE + "]"]), start)
    table_v = variants(args.budget, args.synthetic)
    wanted = [n for n in table_v if not args.only or n in args.only]
    needed = {"exp" if table_v[w][0] == "DreamGym" else table_v[w][0] for w in wanted}
    for name, ov in STARTS.items():
        if name in needed:
            _copy(start, out / name)
            if not _done(out / name, "experience"):
                run_pipeline(cfg(base + ["seed=0", PRE + ",experience]", *ov]), out / name)
    # results accumulate across invocations (e.g. --only subsets run one after the other); a rerun of a
    # finished variant/seed resumes its completed directory and replaces its entry
    rfile = out / "results.json"
    results: dict[str, list[dict]] = json.loads(rfile.read_text()) if rfile.exists() else {}
    for seed in args.seeds:
        for name in wanted:
            src, ov, stage = table_v[name]
            src_dir = out / src
            if src == "DreamGym":  # S2R continues this seed's DreamGym run (or trains it itself)
                src_dir = out / f"seed{seed}" / slug(src)
                src_dir = src_dir if _done(src_dir, "synthetic_rl") else out / "exp"
            d = out / f"seed{seed}" / slug(name)
            _copy(src_dir, d)
            t0 = time.perf_counter()
            m = run_pipeline(cfg(base + [f"seed={seed}", *ov]), d)
            hist = []
            for st in ("synthetic_rl", "s2r") if name == "DreamGym-S2R" else (stage,):
                f = d / "history" / f"{st}.json"
                hist += [dict(h, stage=st) for h in json.loads(f.read_text())] if f.exists() else []
            r = {"seed": seed, "success": m[f"{stage}/test_success_rate"], "score": m[f"{stage}/test_mean_score"],
                 "real": m.get("rl/real_transitions", 0) + m.get("s2r/real_transitions", 0),
                 "synthetic": m.get("synthetic_rl/synthetic_transitions", 0), "sft_success": m["sft/test_success_rate"],
                 "wall_s": time.perf_counter() - t0, "history": hist}
            results[name] = [x for x in results.get(name, []) if x["seed"] != seed] + [r]
            (out / "results.json").write_text(json.dumps(results, indent=1))
            print(f"[seed {seed}] {name}: test success {r['success']:.3f} (real {r['real']:.0f}, "
                  f"synthetic {r['synthetic']:.0f})", flush=True)
    order = [n for n in table_v if n in results]
    results = {n: sorted(results[n], key=lambda r: r["seed"]) for n in order}
    table(results, out, time.perf_counter() - t_start)
    plots(results, out)


def _ms(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{100 * xs[0]:.1f}"
    return f"{100 * statistics.mean(xs):.1f} ± {100 * statistics.stdev(xs):.1f}"


def table(results: dict[str, list[dict]], out: Path, wall_s: float) -> None:
    first = next(iter(results.values()))
    lines = ["| method | real transitions (RL) | synthetic transitions | test success % | test score % |",
             "|---|---|---|---|---|",
             f"| SFT start | 0 | 0 | {100 * first[0]['sft_success']:.1f} | |"]
    for name, rs in results.items():
        lines.append(f"| {name} | {statistics.mean(r['real'] for r in rs):,.0f} | "
                     f"{statistics.mean(r['synthetic'] for r in rs):,.0f} | {_ms([r['success'] for r in rs])} | "
                     f"{_ms([r['score'] for r in rs])} |")
    n = len(first)
    lines.append(f"\n{n} seed{'s' * (n > 1)} (mean ± std over seeds); total wall time {wall_s / 60:.0f} min")
    text = "\n".join(lines)
    print(text)
    (out / "table.md").write_text(text + "\n")


def plots(results: dict[str, list[dict]], out: Path) -> None:
    """success_vs_real.png (final test success against real transitions) and curves.png (the curve split's success on the
    curve goals against training iteration and against real transitions, seed 0 of each variant)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # plotting must not lose the table
        print(f"no plots: {e}")
        return
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, rs in results.items():
        ax.errorbar([statistics.mean(r["real"] for r in rs)], [statistics.mean(r["success"] for r in rs)],
                    yerr=[statistics.stdev(r["success"] for r in rs) if len(rs) > 1 else 0], fmt="o", capsize=3,
                    label=name)
    ax.axhline(next(iter(results.values()))[0]["sft_success"], color="gray", ls=":", label="SFT start")
    ax.set(xlabel="real transitions consumed in RL", ylabel="test success rate", title="success vs real data")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "success_vs_real.png", dpi=100)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, rs in results.items():
        key = curve_key(rs[0]["history"])
        split = key.split("/")[0]
        h = [x for x in rs[0]["history"] if key in x]
        if not h:
            continue
        steps = [i for i, x in enumerate(rs[0]["history"]) if key in x]
        axes[0].plot(steps, [x[key] for x in h], marker="o", label=f"{name} ({split})")
        real = [x.get("budget/real_transitions", 0) if x["stage"] != "synthetic_rl" else 0 for x in h]
        axes[1].plot(real, [x[key] for x in h], marker="o", label=f"{name} ({split})")
    axes[0].set(xlabel="RL iteration (synthetic, then real for S2R)", ylabel="success (curve goals)",
                title="greedy success vs training step")
    axes[1].set(xlabel="real transitions consumed", ylabel="success (curve goals)",
                title="greedy success vs real transitions")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
