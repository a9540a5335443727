"""Fidelity of a run's experience model on a policy's own behaviour (closed and open loop).

    python experiments/bench_fidelity.py --run-dir D [--policy sft] [--experience DIR] [--tasks 200] \
        [--rollouts-per-task 4] [--seed 0] [--split train] [--open-loop-steps 1000] --out F.json [key=value ...]

Closed loop: the policy, sampled as in RL (`algo.temperature`), plays the same N tasks R times in the real env
and in the synthetic env (the run's experience model, replay buffer and rules): success, return, steps and
episode-end causes in both, and the success gap (synthetic - real) with a 95% bootstrap interval over tasks.
Open loop: the real episodes replayed step by step through the experience model (greedy, real history):
reward/done agreement, terminal-success precision/recall/F1, next-action recall, next-state token F1 (with the
run's outcome model, `experience.outcome_model`, judging predicted endings as in the synthetic env; its verdicts on
every real ending are `outcome_*`).
Retrieval follows `replay.exclude` (default task: no task ever sees its own transitions). Trailing
`key=value` overrides change the synthetic env's settings (e.g. `experience.invalid_action=end`). Tasks are
train tasks the offline data never touched (the experience model never trained on them), or `--split val`
where an env has one; never test. The experience model is the run's current one (after synthetic RL with
`experience.refresh_every` > 0: the refreshed one), or `--experience DIR` (relative to the run directory, e.g.
checkpoints/experience: the model before the refresh). Writes flat keys to F.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dreamgym_pl.experience.fidelity import closed_loop_report, open_loop  # noqa: E402
from dreamgym_pl.experience.module import demos_for  # noqa: E402
from dreamgym_pl.models import load_pretrained  # noqa: E402
from dreamgym_pl.policy.algos.base import trajectory_return  # noqa: E402
from dreamgym_pl.rollout.actor import policy_actor  # noqa: E402
from dreamgym_pl.rollout.collector import run_episodes  # noqa: E402
from dreamgym_pl.rollout.engine import HFEngine  # noqa: E402
from dreamgym_pl.stages import Run  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402
from dreamgym_pl.stages.experience import (experience_format, experience_model_cfg, load_replay,  # noqa: E402
                                          unseen_train_tasks)
from dreamgym_pl.stages.policy import algorithm  # noqa: E402
from dreamgym_pl.stages.outcome_model import report as outcome_report  # noqa: E402
from dreamgym_pl.stages.synthetic_rl import make_synthetic_env, stored_starts  # noqa: E402

ROWS = [("success", "closed_loop/real_success", "closed_loop/synthetic_success"),
        ("mean return", "closed_loop/mean_return_real", "closed_loop/mean_return_synthetic"),
        ("steps / episode", "closed_loop/steps_real", "closed_loop/steps_synthetic"),
        ("invalid actions / step", "closed_loop/invalid_actions_per_step_real",
         "closed_loop/invalid_actions_per_step_synthetic")] + \
    [(f"ended: {c}", f"closed_loop/end_{c}_real", f"closed_loop/end_{c}_synthetic")
     for c in ("done", "invalid", "unparseable", "step_limit")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--policy", default="sft", help="stage whose policy checkpoint plays (sft, synthetic_rl, ...)")
    ap.add_argument("--experience", default=None,
                    help="experience model folder in the run directory (default: the run's current one)")
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--rollouts-per-task", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", default="train", choices=["train", "val"])
    ap.add_argument("--open-loop-steps", type=int, default=1000, help="bound on replayed real steps (0: skip)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", required=True)
    args, overrides = ap.parse_known_args()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    d = Path(args.run_dir)
    cfg = run_config(d, overrides)
    run = Run(cfg, d)
    ckpt = d / "checkpoints" / args.policy
    if not (ckpt / "config.json").exists():
        sys.exit(f"--policy {args.policy}: no policy checkpoint at {ckpt}")
    policy, tok = load_pretrained(ckpt, cfg.model.dtype)
    algo = algorithm(run)
    tasks = unseen_train_tasks(run) if args.split == "train" else run.env.tasks(args.split)
    if args.split == "val":  # a run made before the val split existed trained on today's val tasks
        seen = {t.task.task_id for t in run.offline_trajectories()} & {t.task_id for t in tasks}
        if seen:
            sys.exit(f"--split val: the run's offline data covers {len(seen)} of the {len(tasks)} val tasks (the run "
                     f"predates the val split); use --split train, or a run made with the val split")
    tasks = random.Random(args.seed).sample(tasks, min(args.tasks, len(tasks)))
    episodes = [t for t in tasks for _ in range(args.rollouts_per_task)]
    actor = policy_actor(HFEngine(policy, tok, micro_batch=args.batch), run.prompt_cfg, run.env, algo.cfg.temperature,
                         algo.cfg.max_new_tokens, algo.cfg.top_p)
    buffer = load_replay(run)
    experience = (load_pretrained(d / args.experience, experience_model_cfg(cfg)["dtype"])
                  if args.experience else None)
    senv = make_synthetic_env(run, buffer, stored_starts(run), experience)
    senv.enrich = False  # a measurement: the buffer stays as the run left it
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    torch.manual_seed(args.seed)
    real = run_episodes(run.env, episodes, actor, batch_size=args.batch, source="real", progress="real env")
    t1 = time.perf_counter()
    torch.manual_seed(args.seed)
    syn = run_episodes(senv, episodes, actor, batch_size=args.batch, source="synthetic", progress="synthetic env")
    t2 = time.perf_counter()
    out.update(closed_loop_report(real, syn, run.env.max_steps, lambda t: trajectory_return(t, algo.cfg), args.seed))
    if args.open_loop_steps > 0:
        fmt = experience_format(run)
        out.update(open_loop(senv.engine, real, lambda t: demos_for(buffer, t, fmt), fmt, cfg.experience.max_new_tokens,
                             args.open_loop_steps, outcome=senv.outcome))
    if senv.outcome is not None:  # the outcome model's verdicts on every real ending, whatever the model predicts
        out.update(outcome_report(senv.outcome, real, "outcome"))
    out.update({"bench/real_transitions": float(sum(len(t.transitions) for t in real)),
                "bench/synthetic_transitions": float(sum(len(t.transitions) for t in syn)),
                "bench/real_s": t1 - t0, "bench/synthetic_s": t2 - t1, "bench/open_loop_s": time.perf_counter() - t2})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({**out, "args": {**vars(args), "overrides": overrides}}, indent=1, sort_keys=True))
    print(f"policy {args.policy}, experience model {args.experience or run.state.get('experience')}, "
          f"on {len(tasks)} {args.split} tasks x {args.rollouts_per_task} rollouts; "
          f"replay.exclude={cfg.replay.exclude}, experience.invalid_action={cfg.experience.invalid_action}, "
          f"experience.outcome_model={cfg.experience.outcome_model}")
    print("| closed loop | real | synthetic |\n|---|---|---|")
    for name, a, b in ROWS:
        print(f"| {name} | {out[a]:.3f} | {out[b]:.3f} |")
    print(f"success gap (synthetic - real): {out['closed_loop/success_gap']:+.3f} "
          f"(95% CI {out['closed_loop/success_gap_lo']:+.3f} .. {out['closed_loop/success_gap_hi']:+.3f})")
    if args.open_loop_steps > 0:
        print("| open loop | value |\n|---|---|")
        for k in ("reward_agreement", "done_agreement", "terminal_precision", "terminal_recall", "terminal_f1",
                  "action_recall", "action_recall_valid", "admissible_f1", "state_f1", "unparseable", "steps"):
            print(f"| {k} | {out['open_loop/' + k]:.3f} |")
    if senv.outcome is not None:
        print("outcome model on the real endings: " + ", ".join(
            f"{k} {out['outcome_' + k]:.3f}" for k in ("precision", "recall", "f1", "accuracy", "n") if 'outcome_' + k in out))
    if hasattr(run.env, "close"):
        run.env.close()


if __name__ == "__main__":
    main()
