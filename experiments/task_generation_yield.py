"""How many of the task generator's variations the curriculum would accept, per seed and per candidate count.

    python experiments/task_generation_yield.py --run-dir D [--seeds 40] [--candidates 1 4 16] [--seed 0]

The run's experience model, prompted as M_task exactly as synthetic RL prompts it (`curriculum.temperature`,
`max_words`), writes `max(--candidates)` variations of each of `--seeds` train tasks (drawn at random; synthetic RL
draws its seeds by reward variance, so this is the generator's yield on a typical train task, not on RL's seeds).
Each is judged as the curriculum judges it (`judge_generation`: the env's `check_generated_task`, novelty against
every train/val/test instruction; a candidate equal to an earlier accepted one of the same run counts as existing).
Prints the accepted share of all generations, the verdict kinds, and for each K in `--candidates` the share of
seeds with at least one accepted variation among their first K, and the generation seconds per seed.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dreamgym_pl.curriculum import generated_text, judge_generation, task_generation_prompt, text_key  # noqa: E402
from dreamgym_pl.stages import Run  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402
from dreamgym_pl.stages.synthetic_rl import load_experience, task_generation_params  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generation_verdicts import verdict_kind  # noqa: E402


def seeds_with_accepted(accepted: list[list[bool]], k: int) -> float:
    """The share of seeds whose first `k` candidates hold at least one accepted one."""
    return sum(any(row[:k]) for row in accepted) / max(1, len(accepted))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--candidates", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--seed", type=int, default=0)
    args, overrides = ap.parse_known_args()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    d = Path(args.run_dir)
    cfg = run_config(d, overrides)
    run = Run(cfg, d)
    model, tok = load_experience(run)
    engine = run.engine_for("experience", model, tok)
    c = cfg.curriculum
    params = task_generation_params(c)
    train = run.env.tasks("train")
    known = {text_key(t.instruction) for split in ("train", "val", "test") for t in run.env.tasks(split)}
    seeds = random.Random(args.seed).sample(train, min(args.seeds, len(train)))
    k_max = max(args.candidates)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    mode = c.family
    pairs = [(s.instruction, run.env.task_family(s)) for s in seeds for _ in range(k_max)]
    prompts = [task_generation_prompt(instr, fam, mode) for instr, fam in pairs]
    texts = [generated_text(x.text, fam, mode) for x, (_, fam) in zip(engine.generate(prompts, params), pairs)]
    seconds = time.perf_counter() - t0
    kinds: Counter[str] = Counter()
    accepted: list[list[bool]] = []
    for i, s in enumerate(seeds):
        row = []
        for text in texts[i * k_max:(i + 1) * k_max]:
            instr, _, why = judge_generation(text, s, known, run.env.check_generated_task, c.max_words)
            kinds["accepted" if why is None else verdict_kind(f"rejected: {why}")] += 1
            if why is None:
                known.add(text_key(instr))
            row.append(why is None)
        accepted.append(row)
    n = len(texts)
    print(f"{len(seeds)} train seeds x {k_max} candidates = {n} generations, {seconds:.1f} s "
          f"({seconds / max(1, len(seeds)):.2f} s per seed at {k_max})")
    for kind, m in kinds.most_common():
        print(f"{m:5d} {m / n:6.1%}  {kind}")
    for k in sorted(args.candidates):
        print(f"candidates {k:3d}: seeds with an accepted variation {seeds_with_accepted(accepted, k):.3f}")


if __name__ == "__main__":
    main()
