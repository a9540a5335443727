"""Generation cost of the experience model with each KV cache of `--caches` (`engine.cache`): Hugging Face's
dynamic one (grows by concatenation, a copy of the whole cache for every new token), its static one (allocated
once, written in place, attention over all of it) and `filled` (static, sized per call, attention over the filled
positions only), all measured in this run, alternating call by call, each against the first, with the share of
generations that come out token for token the same as the first's (greedy).

Prompts: the experience stage's prompts of a run directory's offline transitions (its trained experience model,
tokenizer and replay buffer: a run after its experience stage), `--prompts` of them in one batch (as the synthetic
env steps 64 episodes at a time), greedy, `experience.max_new_tokens` new tokens at most.

    python experiments/bench_generate.py --run-dir D [--prompts 64] [--reps 3] [--caches dynamic static filled]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--caches", nargs="+", default=["dynamic", "static"], choices=["dynamic", "static", "filled"])
    args = ap.parse_args()

    from dreamgym_pl.core import Transition, group_trajectories, read_jsonl
    from dreamgym_pl.experience.format import build_prompt
    from dreamgym_pl.experience.module import demos_for
    from dreamgym_pl.models import load_pretrained
    from dreamgym_pl.replay.buffer import ReplayBuffer
    from dreamgym_pl.replay.embed import make_embedder
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.sampling import SamplingParams
    from dreamgym_pl.stages.experience import experience_format

    run = Path(args.run_dir)
    cfg = run_config(run)
    model, tok = load_pretrained(run / "checkpoints" / "experience", "float32")
    model.eval()

    fmt = experience_format(SimpleNamespace(cfg=cfg))  # it reads the run's config only
    buffer = ReplayBuffer.load(run / "replay", make_embedder(cfg.replay.embedder, cfg.replay.dim), "rerun the "
                               "experience stage")
    steps = [t for tr in group_trajectories(read_jsonl(run / "offline" / "transitions.jsonl", Transition))
             for t in tr.transitions]
    picked = random.Random(args.seed).sample(steps, min(args.prompts, len(steps)))
    # no history: a bench of generation, not of the format (the history only lengthens some prompts)
    prompts = [build_prompt(t.task.instruction, [], demos_for(buffer, t, fmt), t.state, t.action, fmt) for t in picked]
    params = SamplingParams(temperature=0.0, max_new_tokens=int(cfg.experience.max_new_tokens))
    engines = {c: HFEngine(model, tok, max_prompt_tokens=int(cfg.experience.max_prompt_tokens), micro_batch=len(prompts),
                           cache=c) for c in args.caches}
    print(f"{torch.get_num_threads()} threads; {len(prompts)} prompts of "
          f"{statistics.mean(len(tok(p)['input_ids']) for p in prompts):.0f} tokens on average, greedy, "
          f"{params.max_new_tokens} new tokens at most")
    times: dict[str, list[float]] = {c: [] for c in engines}
    outs: dict[str, list] = {}
    for rep in range(args.reps + 1):  # the first round warms up
        for c, eng in engines.items():
            t0 = time.perf_counter()
            outs[c] = eng.generate(prompts, params)
            if rep:
                times[c].append(time.perf_counter() - t0)
    first = args.caches[0]
    tokens = sum(len(o.token_ids) for o in outs[first])
    for c in engines:
        m = statistics.mean(times[c])
        print(f"{c:8s} {m:.2f} s per call ({len(prompts) / m:.1f} transitions/s, {tokens / m:.0f} tokens/s) over "
              f"{args.reps} calls")
    for c in args.caches[1:]:
        same = sum(a.token_ids == b.token_ids for a, b in zip(outs[first], outs[c])) / len(prompts)
        print(f"ratio {first} / {c}: {statistics.mean(times[first]) / statistics.mean(times[c]):.2f}x; "
              f"generations identical token for token: {same:.3f}")


if __name__ == "__main__":
    main()
