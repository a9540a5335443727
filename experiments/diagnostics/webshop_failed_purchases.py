"""Why a run's policy fails its WebShop purchases: the policy (sampled as in RL) plays N unseen train tasks R times
in the real env, and each failed purchase is classified by the reward's parts (`info`: type, attributes,
options, price; a purchase can fail on several). `--agent` plays a scripted agent instead (e.g. near_miss);
`--judge` also has the run's experience model judge every purchase (greedy, prompts as in training: the real
history, retrieval under replay.exclude) and prints, per class, how many it calls a success; with the run's outcome
model (`experience.outcome_model`, the reward the synthetic env pays) its verdicts too.

`--split val|test` plays the first N goals of that split instead; `--greedy` plays the policy as eval does
(temperature 0). Also printed: which result position each purchase's product was clicked at (`item 1` ...), and
how many truncated episodes ended repeating an invalid action.

    python experiments/diagnostics/webshop_failed_purchases.py --run-dir D [--policy sft] [--agent NAME] [--judge]
        [--tasks 100] [--rollouts-per-task 4] [--split val --greedy]
"""

from __future__ import annotations

import argparse
import collections
import random
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dreamgym_pl.agents import make_agent  # noqa: E402
from dreamgym_pl.models import load_pretrained  # noqa: E402
from dreamgym_pl.rollout.actor import policy_actor  # noqa: E402
from dreamgym_pl.rollout.collector import run_episodes  # noqa: E402
from dreamgym_pl.rollout.engine import HFEngine  # noqa: E402
from dreamgym_pl.stages import Run  # noqa: E402
from dreamgym_pl.stages.context import run_config  # noqa: E402
from dreamgym_pl.stages.experience import unseen_train_tasks  # noqa: E402
from dreamgym_pl.stages.policy import algorithm  # noqa: E402


def failed_parts(info: dict) -> list[str]:
    """The reward parts a purchase missed (empty for a success)."""
    parts = []
    if info.get("r_type", 1.0) < 1:
        parts.append("type")
    if info.get("n_attr_match", 0) < info.get("n_attrs", 0):
        parts.append("attributes")
    if info.get("n_option_match", 0) < info.get("n_options", 0):
        parts.append("options")
    if info.get("r_price", 1.0) < 1:
        parts.append("price")
    return parts


def bought_position(traj) -> str:
    """The result handle (e.g. `item 1`) of the last product clicked before a purchase ('' if none)."""
    for t in reversed(traj.transitions):
        m = re.fullmatch(r"\s*click\s*\[\s*(item\s+\d+)\s*\]\s*", t.action.lower())
        if m and not t.info.get("invalid"):
            return " ".join(m.group(1).split())
    return ""


def invalid_loop(traj, n: int = 3) -> bool:
    """Whether the episode's last n actions were the same invalid action."""
    last = traj.transitions[-n:]
    return len(last) == n and all(t.info.get("invalid") for t in last) and len({t.action for t in last}) == 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--policy", default="sft")
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--rollouts-per-task", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--agent", default=None, help="a scripted agent of the env instead of the policy (e.g. near_miss)")
    ap.add_argument("--judge", action="store_true", help="the run's experience model judges every purchase")
    ap.add_argument("--split", default=None, choices=["train", "val", "test"],
                    help="the first --tasks goals of this split (default: random unseen train tasks)")
    ap.add_argument("--greedy", action="store_true", help="play the policy greedily (as eval does)")
    args, overrides = ap.parse_known_args()
    d = Path(args.run_dir)
    run = Run(run_config(d, overrides), d)
    if args.split:
        tasks = run.env.tasks(args.split)[: args.tasks]
    else:
        pool = unseen_train_tasks(run)
        tasks = random.Random(args.seed).sample(pool, min(args.tasks, len(pool)))
    if args.agent:
        actor, who = make_agent(args.agent, seed=args.seed, eps=run.cfg.collect.noisy_eps, env=run.env), args.agent
    else:
        policy, tok = load_pretrained(d / "checkpoints" / args.policy, run.cfg.model.dtype)
        algo = algorithm(run)
        actor = policy_actor(HFEngine(policy, tok, micro_batch=64), run.prompt_cfg, run.env,
                             0.0 if args.greedy else algo.cfg.temperature, algo.cfg.max_new_tokens, algo.cfg.top_p)
        who = f"policy {args.policy}" + (" (greedy)" if args.greedy else "")
    torch.manual_seed(args.seed)
    real = run_episodes(run.env, [t for t in tasks for _ in range(args.rollouts_per_task)], actor, batch_size=64)
    combos, parts = collections.Counter(), collections.Counter()
    labels = []
    for t in real:
        info = t.transitions[-1].info if t.transitions else {}
        if "r_type" not in info:
            label = "no purchase"
        elif info.get("success"):
            label = "success"
        else:
            missed = failed_parts(info)
            label = "failed: " + " + ".join(missed)
            parts.update(missed)
        combos[label] += 1
        labels.append(label)
    judged = judge_purchases(run, d, real, labels) if args.judge else {}
    print(f"{len(real)} episodes of {who}")
    for k, v in combos.most_common():
        print(f"{v:5d}  {k}" + (f"   judged success by the experience model: {judged[k]}/{v}" if k in judged else ""))
    print("failed purchases missing each part:", dict(parts))
    pos = {"success": collections.Counter(bought_position(t) for t, lab in zip(real, labels) if lab == "success"),
           "failed": collections.Counter(bought_position(t) for t, lab in zip(real, labels) if lab.startswith("failed"))}
    print("result position of the product bought:", {k: dict(v.most_common()) for k, v in pos.items()})
    stuck = [t for t, lab in zip(real, labels) if lab == "no purchase"]
    print(f"no purchase: {sum(invalid_loop(t) for t in stuck)}/{len(stuck)} ended repeating one invalid action")


def judge_purchases(run: Run, d: Path, real: list, labels: list[str]) -> dict[str, int]:
    """label -> how many of its purchases the run's experience model judges a success; prints verdict_counts."""
    from dreamgym_pl.experience.annotate import annotate
    from dreamgym_pl.experience.judge import predict_last_steps, verdict_counts
    from dreamgym_pl.experience.module import demos_for
    from dreamgym_pl.experience.outcome import verdict
    from dreamgym_pl.stages.outcome_model import load_outcome
    from dreamgym_pl.stages.experience import experience_format, load_replay

    bought = [(t, lab) for t, lab in zip(real, labels) if lab != "no purchase"]
    trajs = [t for t, _ in bought]
    annotate(trajs, run.env.explain)
    fmt, buffer = experience_format(run), load_replay(run)
    model, tok = load_pretrained(d / run.state.get("experience", "checkpoints/experience"),
                                 run.cfg.model.dtype)
    preds = predict_last_steps(HFEngine(model, tok, micro_batch=32), trajs, lambda t: demos_for(buffer, t, fmt), fmt,
                               run.cfg.experience.max_new_tokens)
    out: dict[str, int] = collections.Counter()
    for (_, lab), p in zip(bought, preds):
        out[lab] += int(p.valid and p.reward >= 1.0)
    print("experience model on these purchases:", verdict_counts(preds, [t.transitions[-1].reward for t in trajs]))
    outcome = load_outcome(run)
    if outcome is not None:  # the reward the synthetic env pays: the outcome model's verdict on each purchase
        said = collections.Counter()
        for (t, lab), (p, s) in zip(bought, outcome([(t.task.instruction, t.transitions[-1].state.text,
                                                      t.transitions[-1].action) for t in trajs])):
            said[lab] += int(verdict(p, s)[0])
        print("outcome model (experience.outcome_model), judged success per class:",
              {lab: f"{said[lab]}/{sum(1 for _, x in bought if x == lab)}" for lab in dict.fromkeys(x for _, x in bought)})
    return dict(out)


if __name__ == "__main__":
    main()
