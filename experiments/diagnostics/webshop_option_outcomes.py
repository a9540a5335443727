"""Where a WebShop run's greedy test successes come from, by how many options each goal asks for: successes on the
goals asking for two or more options and on the others, and the partial purchases on the former (score 0.70-0.99: one
requirement missed, an option as the `hasty` demonstrator misses it, or an attribute or the price;
docs/results/2026-12-03_hasty_demonstrations.md). Reads each run's `eval/test_outcomes.jsonl`; the goals come from the
run's own env config. No model is loaded.

    python experiments/diagnostics/webshop_option_outcomes.py D1 [D2 ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dreamgym_pl.envs.base import make_vec_env  # noqa: E402
from dreamgym_pl.outcomes import read_outcomes  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402


def option_outcomes(success: dict[str, float], score: dict[str, float], n_options: dict[str, int]) -> dict[str, int]:
    """Counts over the goals of `success`: multi (asking >= 2 options) and few (< 2), their successes, and the
    multi-option purchases that missed one requirement (0.70 <= score < 1)."""
    multi = [g for g in success if n_options[g] >= 2]
    few = [g for g in success if n_options[g] < 2]
    return {"multi": len(multi), "multi_success": int(sum(success[g] for g in multi)),
            "few": len(few), "few_success": int(sum(success[g] for g in few)),
            "multi_short": sum(1 for g in multi if 0.7 <= score[g] < 1.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run directories with eval/test_outcomes.jsonl")
    args = ap.parse_args()
    for d in map(Path, args.runs):
        env = run_config(d).env  # today's keys of the run's options (removed ones left out)
        if env.name != "webshop":
            raise SystemExit(f"{d}: env.name is {env.name!r}; this script reads WebShop runs only")
        kwargs = {k: v for k, v in OmegaConf.to_container(env, resolve=True).items() if k != "name"}
        tasks = make_vec_env(env.name, **kwargs).tasks("test")  # the env as the run built it (stages/context.py)
        n_options = {t.task_id: len(t.goal.get("goal_options", {})) for t in tasks}
        path = d / "eval" / "test_outcomes.jsonl"
        c = option_outcomes(read_outcomes(path), read_outcomes(path, "score"), n_options)
        print(f"{d}: goals asking >= 2 options {c['multi_success']}/{c['multi']} succeed, "
              f"{c['multi_short']} partial purchases (score 0.70-0.99); fewer options {c['few_success']}/{c['few']} succeed")


if __name__ == "__main__":
    main()
