"""Training-step cost of the supervised stages' batches, in the seeded random order the stages draw them in
(`dreamgym_pl/policy/batching.py`), whole (the reference) against `micro_batches=N` as the stages compute it
(`dreamgym_pl/policy/micro.py`: N length-sorted parts, the batch's samples and loss unchanged), measured in this
run, alternating step by step on one model.

Batches, built from a run directory's offline data and tokenizer (after its sft stage; `--experience` also needs
its experience stage's replay buffer):
- copy: the sft stage's copy warm start (`sft.batch_size`, examples of 4-`sft.copy_length` tokens);
- sft: the sft stage's demonstrations and copy examples;
- experience: the experience stage's training samples (`experience.batch_size`).
For each `--micro N`, each kind times `--steps` forward+backward passes (the first batches of one pass; one warm-up
batch first) on a model of the run's `model=tiny` size and prints mean seconds per step, the padding share of the
random order's pass, the ratio whole / micro, the token cells (padded positions included) of each, and how far the
first batch's gradients differ (floating-point rounding only). The number of steps a stage takes is fixed
(`max_steps`), so the ratio is the stage's training speed-up.

    python experiments/bench_batching.py --run-dir D [--steps 40] [--experience] [--micro 2 4 8]
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
from omegaconf import OmegaConf  # noqa: E402

from dreamgym_pl.experience.train_steps import target_loss  # noqa: E402
from dreamgym_pl.policy.batching import padding_share, sample_lengths, shuffled_order  # noqa: E402
from dreamgym_pl.policy.micro import split_rows  # noqa: E402
from dreamgym_pl.policy.samples import collate  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402
from dreamgym_pl.stages.sft import clone_set  # noqa: E402


def step_seconds(model, batch, micro: int = 1) -> float:
    """A forward+backward pass of the batch's loss as the stages compute it with `micro_batches=micro`
    (`dreamgym_pl/policy/micro.py`: length-sorted parts, one graph, the whole batch's token mean; 1: whole)."""
    t0 = time.perf_counter()
    target_loss(model, batch, micro).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def random_batches(samples: list, batch_size: int, steps: int, pad_id: int, seed: int) -> list[dict]:
    """`steps + 1` collated batches of `samples` in a seeded random order (the first one to warm up on)."""
    order = shuffled_order(len(samples), random.Random(seed))
    return [collate([samples[i] for i in order[j:j + batch_size]], pad_id)
            for j in range(0, min(len(order), (steps + 1) * batch_size), batch_size)]


def compare_micro(name: str, model, samples: list, batch_size: int, micro: int, steps: int, pad_id: int,
                  seed: int) -> None:
    """Random batches, whole (the reference) and with `micro` length-sorted micro-batches, alternating step by step;
    the gradients of the first batch compared (largest difference relative to the largest gradient)."""
    whole = random_batches(samples, batch_size, steps, pad_id, seed)
    target_loss(model, whole[0]).backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    target_loss(model, whole[0], micro).backward()
    diff = max(float((p.grad - r).abs().max()) for p, r in zip(model.parameters(), ref))
    scale = max(float(r.abs().max()) for r in ref)
    model.zero_grad(set_to_none=True)
    times: dict[str, list[float]] = {"whole": [], "micro": []}
    for b in whole[1:]:
        times["whole"].append(step_seconds(model, b))
        times["micro"].append(step_seconds(model, b, micro))
    cells = {"whole": sum(int(b["input_ids"].numel()) for b in whole[1:]),
             "micro": sum(int(p["input_ids"].numel()) for b in whole[1:] for p in split_rows(b, micro))}
    mean = {k: statistics.mean(v) for k, v in times.items()}
    pad = padding_share(sample_lengths(samples), shuffled_order(len(samples), random.Random(seed)), batch_size)
    print(f"{name:10s} random order: padding share of a pass {pad:.3f} (batch {batch_size}, {len(samples)} samples)")
    for k in times:
        print(f"{name:10s} {k:8s} {mean[k]:.3f} s/step over {len(times[k])} steps, {cells[k]:,} token cells "
              f"(batch {batch_size}{'' if k == 'whole' else f' as {micro} micro-batches'})")
    print(f"{name:10s} ratio whole / micro ({micro}): {mean['whole'] / mean['micro']:.2f}x; token cells "
          f"{cells['whole'] / cells['micro']:.2f}x fewer; first batch's gradients: largest difference "
          f"{diff:.2e} of the largest gradient {scale:.2e} ({diff / scale:.1e} relative)")


def load_run(run_dir: str, seed: int):
    """(config, tokenizer, offline trajectories, a fresh `model=tiny`-sized Llama) of a run directory after sft."""
    from dreamgym_pl.core import Transition, group_trajectories, read_jsonl
    from dreamgym_pl.models import build_tiny_llama
    from transformers import PreTrainedTokenizerFast

    run = Path(run_dir)
    cfg = run_config(run)
    tok = PreTrainedTokenizerFast.from_pretrained(run / "checkpoints" / "sft")
    trajs = group_trajectories(read_jsonl(run / "offline" / "transitions.jsonl", Transition))
    m = cfg.model
    model = build_tiny_llama(tok, m.hidden_size, m.num_layers, m.num_heads, m.intermediate_size, m.max_positions,
                             seed).train()
    return cfg, tok, trajs, model


def copy_samples(cfg, tok, trajs, n: int, seed: int) -> list:
    """`n` examples of the sft stage's copy warm start."""
    from dreamgym_pl.experience.copying import copy_examples
    from dreamgym_pl.rollout.prompts import ACTION_CUE
    from dreamgym_pl.stages.copy_start import copy_pool

    pool, sep = copy_pool(tok, trajs, ACTION_CUE)
    return copy_examples(pool, n, 4, cfg.sft.copy_length, sep, tok.eos_token_id, random.Random(seed))


def sft_samples(cfg, tok, trajs, seed: int) -> list:
    """The sft stage's training samples (demonstrations and mixed-in copy examples)."""
    from dreamgym_pl.policy.algos.sft import sft_loader
    from dreamgym_pl.rollout.prompts import ACTION_CUE, PromptConfig
    from dreamgym_pl.stages.copy_start import mixed_copy_examples

    c = cfg.sft
    good = clone_set(trajs, c.source, c.get("min_score"), c.num_trajectories)
    mixed = mixed_copy_examples(tok, trajs, c.copy_examples, c.copy_length, ACTION_CUE, seed)
    return list(sft_loader(good, tok, PromptConfig(**OmegaConf.to_container(cfg.prompt)), c.batch_size,
                           extra=mixed).dataset)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--experience", action="store_true", help="also the experience stage's samples (needs replay/)")
    ap.add_argument("--micro", type=int, nargs="+", default=[4],
                    help="time each random batch whole and with micro_batches=N (policy/micro.py), for each N given "
                         "(default: 4, the stages' default)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    cfg, tok, trajs, model = load_run(args.run_dir, args.seed)
    run, c = Path(args.run_dir), cfg.sft
    print(f"{torch.get_num_threads()} threads; model of {sum(p.numel() for p in model.parameters()):,} parameters")

    copies = copy_samples(cfg, tok, trajs, (args.steps + 1) * c.batch_size, args.seed)
    for n in args.micro:
        compare_micro("copy", model, copies, c.batch_size, n, args.steps, tok.pad_token_id, args.seed)

    samples = sft_samples(cfg, tok, trajs, args.seed)
    for n in args.micro:
        compare_micro("sft", model, samples, c.batch_size, n, args.steps, tok.pad_token_id, args.seed)

    if args.experience:
        from dreamgym_pl.experience.module import experience_samples
        from dreamgym_pl.replay.buffer import ReplayBuffer
        from dreamgym_pl.replay.embed import make_embedder
        from dreamgym_pl.stages.experience import experience_format

        buffer = ReplayBuffer.load(run / "replay", make_embedder(cfg.replay.embedder, cfg.replay.dim), "rerun the "
                                   "experience stage")
        rng = random.Random(args.seed)
        picked = rng.sample(trajs, min(len(trajs), 300))
        samples = experience_samples(picked, tok, experience_format(SimpleNamespace(cfg=cfg)), buffer)
        for n in args.micro:
            compare_micro("experience", model, samples, cfg.experience.batch_size, n, args.steps,
                          tok.pad_token_id, args.seed)


if __name__ == "__main__":
    main()
