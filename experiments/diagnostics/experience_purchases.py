"""How a run's experience model judges the episode-ending steps of its own training data (WebShop: purchases).

A diagnostic for the purchase judgement (docs/results/2026-11-30_fidelity_and_outcome_model.md): the experience model
is run greedily on the last step of training-split offline episodes (the experience stage's task split, prompts built
exactly as in training: real history, retrieved demonstrations under `replay.exclude`), separately for failed and
successful episodes. Prints how many predicted rewards agree with the real one (within 0.05), how many are predicted
successes, and the first examples' real and predicted reasoning traces.

    python experiments/diagnostics/experience_purchases.py --run-dir D [--n 40] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--n", type=int, default=40, help="failed episodes judged (and half as many successful ones)")
    ap.add_argument("--show", type=int, default=3, help="examples printed per group")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from dreamgym_pl.experience.annotate import annotate
    from dreamgym_pl.experience.judge import predict_last_steps
    from dreamgym_pl.experience.module import demos_for, split_by_task
    from dreamgym_pl.models import load_pretrained
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.stages import Run
    from dreamgym_pl.stages.context import run_config
    from dreamgym_pl.stages.experience import experience_format, load_replay

    d = args.run_dir
    cfg = run_config(d, [])
    run = Run(cfg, d)
    trajs = run.offline_trajectories()
    annotate(trajs, run.env.explain)
    train, _ = split_by_task(trajs, cfg.experience.val_fraction, cfg.seed)
    fmt, buffer = experience_format(run), load_replay(run)
    model, tok = load_pretrained(d / run.state.get("experience", "checkpoints/experience"),
                                 cfg.model.dtype)
    engine = HFEngine(model, tok, micro_batch=32)
    # episodes the env ended (a purchase, a win, a loss), not the step limit: the steps the model must judge
    ends = [tr for tr in train if tr.transitions and tr.transitions[-1].done and len(tr.transitions) < run.env.max_steps]
    groups = {"failed": [tr for tr in ends if tr.transitions[-1].reward < 1.0][: args.n],
              "successful": [tr for tr in ends if tr.transitions[-1].reward >= 1.0][: max(1, args.n // 2)]}
    out: dict = {}
    for name, group in groups.items():
        preds = predict_last_steps(engine, group, lambda t: demos_for(buffer, t, fmt), fmt,
                                   cfg.experience.max_new_tokens)
        agree = sum(1 for p, tr in zip(preds, group) if abs(p.reward - tr.transitions[-1].reward) <= 0.05)
        success = sum(1 for p in preds if p.valid and p.reward >= 1.0)
        out[name] = {"episodes": len(group), "reward_agrees": agree, "predicted_success": success,
                     "examples": [{"task": tr.task.instruction, "real_reward": tr.transitions[-1].reward,
                                   "real": tr.transitions[-1].reasoning, "predicted_reward": p.reward,
                                   "predicted": p.reasoning} for p, tr in list(zip(preds, group))[: args.show]]}
        print(f"{name}: {len(group)} episodes, predicted reward agrees {agree}, predicted success {success}")
        for ex in out[name]["examples"]:
            print(f"  task: {ex['task']}\n  real ({ex['real_reward']:.2f}): {ex['real']}\n"
                  f"  predicted ({ex['predicted_reward']:.2f}): {ex['predicted']}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
