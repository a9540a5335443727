"""Can a run's experience model learn the purchase judgement when trained on nothing else? A capacity check.

The fidelity measurements (docs/results/2026-11-30_fidelity_and_outcome_model.md) find the experience model calling
every purchase a success, also on its own training data. This diagnostic separates "not enough of the right training"
from "the model cannot": it takes the episode-ending steps (WebShop: purchases) of the experience stage's training
split, splits their tasks into a fit part and a held part, judges both with the run's experience model (greedy,
prompts exactly as in training), fine-tunes the loaded model (the run's files are only read) on the fit part's ending
steps only (failed and successful ones drawn equally often) for `--steps` AdamW steps, and judges both parts again.
Nothing is written to the run.

    python experiments/diagnostics/purchase_fit.py --run-dir D [--steps 1500] [--lr 1e-3] [--held-fraction 0.25] [--out F.json]

Reading it: if the fit part's failures are still judged successes after training, the model cannot represent
the comparison (capacity); if the fit part is learned but the held part is not, it memorises; if both move,
the experience stage's training simply does not spend enough of its steps on purchases.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--steps", type=int, default=1500, help="AdamW steps on the fit part's ending steps")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--held-fraction", type=float, default=0.25, help="share of the ending steps' tasks held out")
    ap.add_argument("--max-judged", type=int, default=200, help="ending steps judged per part")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import logging

    from dreamgym_pl.experience.annotate import annotate
    from dreamgym_pl.experience.endings import balanced, decided_ending, ending_samples
    from dreamgym_pl.experience.judge import predict_last_steps, verdict_counts
    from dreamgym_pl.experience.module import demos_for, experience_samples, split_by_task
    from dreamgym_pl.experience.train_steps import adamw_steps, shuffled_batches
    from dreamgym_pl.models import load_pretrained
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.stages import Run
    from dreamgym_pl.stages.context import run_config
    from dreamgym_pl.stages.experience import experience_format, load_replay

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    d = args.run_dir
    cfg = run_config(d, [])
    run = Run(cfg, d)
    trajs = run.offline_trajectories()
    annotate(trajs, run.env.explain)
    train, _ = split_by_task(trajs, cfg.experience.val_fraction, cfg.seed)
    ends = [tr for tr in train if decided_ending(tr)]
    fit, held = split_by_task(ends, args.held_fraction, args.seed)
    fmt, buffer = experience_format(run), load_replay(run)
    model, tok = load_pretrained(d / run.state.get("experience", "checkpoints/experience"),
                                 cfg.model.dtype)
    demos = lambda t: demos_for(buffer, t, fmt)  # noqa: E731
    rng = random.Random(args.seed)
    judged = {"fit": rng.sample(fit, min(len(fit), args.max_judged)),
              "held": rng.sample(held, min(len(held), args.max_judged))}

    def judge(when: str) -> dict[str, dict[str, float]]:
        engine = HFEngine(model, tok, micro_batch=32)
        res = {}
        for part, group in judged.items():
            preds = predict_last_steps(engine, group, demos, fmt, cfg.experience.max_new_tokens)
            res[part] = verdict_counts(preds, [tr.transitions[-1].reward for tr in group])
            r = res[part]
            print(f"{when:6s} {part:4s}: failed judged success {r['failed_judged_success']:.0f}/{r['failed']:.0f}, "
                  f"successful judged success {r['successful_judged_success']:.0f}/{r['successful']:.0f}, "
                  f"verdict accuracy {r['accuracy']:.3f}, reward agrees {r['reward_agrees']:.0f}", flush=True)
        return res

    out: dict = {"fit_episodes": len(fit), "held_episodes": len(held), "steps": args.steps, "lr": args.lr,
                 "before": judge("before")}
    failed, successful = ending_samples(fit, experience_samples(fit, tok, fmt, buffer))
    balanced_samples = balanced(failed, successful)
    print(f"fit part: {len(failed)} failed + {len(successful)} successful ending steps, drawn equally "
          f"({len(balanced_samples)} samples); held part: {len(held)} episodes", flush=True)
    batches = shuffled_batches(lambda: balanced_samples, args.batch_size, tok.pad_token_id, args.seed)
    losses = adamw_steps(model, batches, args.steps, args.lr, warmup_steps=50, grad_clip=cfg.experience.grad_clip,
                         what="purchase fit", log_every=100)
    out["loss_first_100"] = sum(losses[:100]) / max(1, len(losses[:100]))
    out["loss_last_100"] = sum(losses[-100:]) / max(1, len(losses[-100:]))
    model.eval()
    out["after"] = judge("after")
    print(json.dumps({k: v for k, v in out.items() if k not in ("before", "after")}))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
