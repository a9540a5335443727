"""Where a run's experience model is unfaithful, by kind of step: the run's policy, sampled as in RL, plays N unseen
train tasks R times in the real env; every real step is replayed through the experience model (greedy, the real
history, retrieval as the run's config says) and scored per kind (`fidelity.step_kind`): search, a click that opens
a subject (`env.action_subject`: a product from a results page) whose page a real transition in the replay buffer
shows or not, a step that ends the episode, other. Scores: next-state token F1, admissible-list F1, next-action
recall (only actions the real env accepted), reward agreement (endings judged by the run's outcome model where it has
one, as in the synthetic env). The replay buffer is the run's as it stands (after synthetic RL and S2R it also holds
their real transitions), so "shown" and the demonstrations are those of the end of the run.

    python experiments/diagnostics/step_fidelity.py --run-dir D [--policy sft] [--tasks 100] [--rollouts-per-task 2] [--seed 0]
        [--out F.json] [key=value ...]

Two runs from the same collect and SFT with the same seed replay the same real episodes, so their rows compare
step for step.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dreamgym_pl.experience.fidelity import open_loop_steps, scores_by_kind, step_kind  # noqa: E402
from dreamgym_pl.experience.module import demos_for  # noqa: E402
from dreamgym_pl.models import load_pretrained  # noqa: E402
from dreamgym_pl.rollout.actor import policy_actor  # noqa: E402
from dreamgym_pl.rollout.collector import run_episodes  # noqa: E402
from dreamgym_pl.rollout.engine import HFEngine  # noqa: E402
from dreamgym_pl.stages import Run  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402
from dreamgym_pl.stages.experience import (experience_format, experience_model_cfg, load_replay,  # noqa: E402
                                          unseen_train_tasks)
from dreamgym_pl.stages.outcome_model import load_outcome  # noqa: E402
from dreamgym_pl.stages.policy import algorithm  # noqa: E402

COLS = ("state_f1", "admissible_f1", "action_recall_valid", "reward_agreement", "steps")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--policy", default="sft")
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--rollouts-per-task", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default=None)
    args, overrides = ap.parse_known_args()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    d = Path(args.run_dir)
    cfg = run_config(d, overrides)
    run = Run(cfg, d)
    policy, tok = load_pretrained(d / "checkpoints" / args.policy, cfg.model.dtype)
    algo = algorithm(run)
    pool = unseen_train_tasks(run)
    tasks = random.Random(args.seed).sample(pool, min(args.tasks, len(pool)))
    actor = policy_actor(HFEngine(policy, tok, micro_batch=args.batch), run.prompt_cfg, run.env, algo.cfg.temperature,
                         algo.cfg.max_new_tokens, algo.cfg.top_p)
    torch.manual_seed(args.seed)
    real = run_episodes(run.env, [t for t in tasks for _ in range(args.rollouts_per_task)], actor,
                        batch_size=args.batch, source="real", progress="real env")
    buffer, fmt = load_replay(run), experience_format(run)
    subject_of = run.env.action_subject
    if buffer.subject is None:  # the kinds need the subject index even where the run's prompts do not use it
        buffer.set_subject(subject_of)
    exp, etok = load_pretrained(d / run.state.get("experience", "checkpoints/experience"),
                                 experience_model_cfg(cfg)["dtype"])
    parsed, refs, nxt, ok = open_loop_steps(HFEngine(exp, etok, micro_batch=args.batch), real,
                                            lambda t: demos_for(buffer, t, fmt), fmt, cfg.experience.max_new_tokens,
                                            outcome=load_outcome(run),
                                            ending_check=run.env.ending_check if cfg.experience.ending_rules else None)
    kinds = [step_kind(t, subject_of(t.state.text, t.action),
                       buffer.subject_for(t.state.text, t.action, fmt.exclude, t.task.task_id,
                                          t.info.get("episode")) is not None) for t in refs]
    res = scores_by_kind(parsed, refs, nxt, ok, kinds)
    print(f"{d}: policy {args.policy}, {len(real)} real episodes, replay.subject_demos="
          f"{cfg.replay.get('subject_demos', False)}, experience.demo_next_words={cfg.experience.get('demo_next_words')}")
    print("| kind | " + " | ".join(COLS) + " |\n|---|" + "---|" * len(COLS))
    for k, v in res.items():
        print(f"| {k} | " + " | ".join(f"{v['open_loop/' + c]:.3f}" if c != "steps" else f"{int(v['open_loop/steps'])}"
                                      for c in COLS) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"by_kind": res, "args": {**vars(args), "overrides": overrides}}, indent=1))


if __name__ == "__main__":
    main()
