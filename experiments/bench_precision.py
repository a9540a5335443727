"""Training-step cost in float32 against bfloat16 autocast (`trainer.precision: bf16-mixed`, `dreamgym_pl/precision.py`),
both measured in this run, alternating step by step on one model each, for the three kinds of training step whose
precision a run can change:
- copy: the sft stage's copy warm start examples;
- sft: the sft stage's samples;
  (both as the product steps them: the forward under `precision.autocast`, no weight-cast cache, as `adamw_steps` and
  Lightning's precision plugin do; backward and AdamW outside it)
- outcome: the outcome model (all-MiniLM-L6-v2) on the run's episode endings, its real `train_outcome_model` steps,
  with the run's `micro_batches` and with 1 (each run's mean step, tokenisation and first step included).
Batches come from a run directory after its experience stage (offline data, tokenizer, outcome endings), cut into the
run's `micro_batches` parts as the stages do. Prints seconds per step and the ratio float32 / bfloat16 (> 1: bfloat16
is faster), and the CPU's ISA flags (bfloat16 is fast only with AMX, `amx_bf16`).

    python experiments/bench_precision.py --run-dir D [--steps 20] [--outcome-steps 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from bench_batching import copy_samples, load_run, random_batches, sft_samples  # noqa: E402
from dreamgym_pl.experience.train_steps import target_loss  # noqa: E402
from dreamgym_pl.precision import autocast  # noqa: E402
from dreamgym_pl.provenance import cpu_flags  # noqa: E402

PRECISIONS = ("32-true", "bf16-mixed")


def adamw_step(model, opt, batch, micro: int, precision: str) -> float:
    """One AdamW step of the batch's target loss, its forward under `precision`'s autocast."""
    t0 = time.perf_counter()
    with autocast(precision):
        loss = target_loss(model, batch, micro)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return time.perf_counter() - t0


def tiny_kind(name: str, cfg, tok, samples: list, batch_size: int, steps: int, seed: int) -> None:
    from dreamgym_pl.models import build_tiny_llama

    batches = random_batches(samples, batch_size, steps, tok.pad_token_id, seed)
    m, micro = cfg.model, int(cfg.get("micro_batches", 1))
    models = {p: build_tiny_llama(tok, m.hidden_size, m.num_layers, m.num_heads, m.intermediate_size,
                                  m.max_positions, seed).train() for p in PRECISIONS}
    opts = {p: torch.optim.AdamW(models[p].parameters(), lr=1e-4) for p in PRECISIONS}
    times: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    for i, b in enumerate(batches):
        for p in PRECISIONS:  # alternating, so that a drift of the machine's speed hits both
            t = adamw_step(models[p], opts[p], b, micro, p)
            if i > 0:  # the first batch warms up
                times[p].append(t)
    report(name, times, f"batch {batch_size}, micro_batches {micro}, {len(times['32-true'])} steps")


def outcome_kind(run_dir: Path, cfg, steps: int, seed: int) -> None:
    from dreamgym_pl.core import Transition, group_trajectories, read_jsonl
    from dreamgym_pl.experience.outcome import OutcomeModel, outcome_examples, train_outcome_model

    trajs = group_trajectories(read_jsonl(run_dir / "offline" / "transitions.jsonl", Transition))
    extra = run_dir / "offline" / "outcome_transitions.jsonl"
    if extra.exists():
        trajs += group_trajectories(read_jsonl(extra, Transition))
    ex = outcome_examples(trajs)
    e = cfg.experience
    for micro in sorted({int(cfg.get("micro_batches", 1)), 1}, reverse=True):
        times: dict[str, list[float]] = {p: [] for p in PRECISIONS}
        for rep in range(2):  # two rounds of each, alternating
            for p in PRECISIONS:
                model = OutcomeModel(max_length=e.outcome_max_length, precision=p)
                t0 = time.perf_counter()
                train_outcome_model(model, ex, steps, e.outcome_batch_size, e.outcome_lr, seed + rep,
                                    micro_batches=micro)
                times[p].append((time.perf_counter() - t0) / steps)
        report(f"outcome/{micro}", times, f"batch {e.outcome_batch_size}, micro_batches {micro}, 2 x {steps} steps "
               f"(means of each run's steps)")


def report(name: str, times: dict[str, list[float]], what: str) -> None:
    mean = {p: statistics.mean(v) for p, v in times.items()}
    print(f"{name:11s} float32 {mean['32-true']:.3f} s/step, bfloat16 {mean['bf16-mixed']:.3f} s/step: "
          f"float32 / bfloat16 = {mean['32-true'] / mean['bf16-mixed']:.2f}x ({what})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--steps", type=int, default=20, help="timed steps of the tiny model's kinds")
    ap.add_argument("--outcome-steps", type=int, default=10, help="steps of each outcome-model run (0: skip)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cfg, tok, trajs, _ = load_run(args.run_dir, args.seed)
    print(f"{torch.get_num_threads()} threads; CPU flags {' '.join(cpu_flags())}")
    c = cfg.sft
    tiny_kind("copy", cfg, tok, copy_samples(cfg, tok, trajs, (args.steps + 1) * c.batch_size, args.seed),
              c.batch_size, args.steps, args.seed)
    tiny_kind("sft", cfg, tok, sft_samples(cfg, tok, trajs, args.seed), c.batch_size, args.steps, args.seed)
    if args.outcome_steps > 0:
        outcome_kind(Path(args.run_dir), cfg, args.outcome_steps, args.seed)


if __name__ == "__main__":
    main()
