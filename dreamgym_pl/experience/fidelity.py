"""Fidelity of the synthetic env on a policy's own behaviour (not only on offline steps).

- closed loop: the same policy, sampled as in RL, on the same tasks in the real and in the synthetic env:
  success, return, length and what ended the episodes, in both; the success gap (synthetic - real) with a
  95% interval from a bootstrap over tasks;
- open loop: the policy's real trajectories replayed step by step through the experience model with the real
  history: reward and done agreement, terminal-success precision/recall/F1, recall of the policy's next action
  in the predicted admissible list, next-state token F1.
Scoring is pure (unit-tested); `open_loop` calls the experience model through an engine.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

from dreamgym_pl.core import Task, Trajectory, Transition
from dreamgym_pl.experience.format import INVALID_STATE, ExperienceFormat, ParsedStep
from dreamgym_pl.experience.judge import predict_steps, score_steps
from dreamgym_pl.experience.outcome import Outcome, classification_report, judge_endings
from dreamgym_pl.rollout.sampling import GenerationEngine

END_CAUSES = ("done", "invalid", "unparseable", "step_limit")


def end_cause(traj: Trajectory, max_steps: int) -> str:
    """Why an episode ended: the env said done, an invalid action ended it (the synthetic env's failure rule),
    an unparseable model output ended it, or the step limit cut it."""
    if not traj.transitions:
        return "done"
    last = traj.transitions[-1]
    if last.info.get("invalid_output"):
        return "unparseable"
    if last.info.get("truncated") or not last.done or len(traj.transitions) > max_steps:
        return "step_limit"
    if last.info.get("synthetic") and last.info.get("invalid") and last.next_state.text == INVALID_STATE:
        return "invalid"
    return "done"


def episode_report(trajs: Sequence[Trajectory], max_steps: int, returns: Sequence[float]) -> dict[str, float]:
    """Success, mean return, steps per episode and the share of each end cause."""
    n = max(1, len(trajs))
    out = {"success": sum(t.success for t in trajs) / n, "mean_return": sum(returns) / n,
           "steps": sum(len(t.transitions) for t in trajs) / n,
           "invalid_actions_per_step": sum(1 for t in trajs for s in t.transitions if s.info.get("invalid"))
           / max(1, sum(len(t.transitions) for t in trajs))}
    causes = [end_cause(t, max_steps) for t in trajs]
    out.update({f"end_{c}": causes.count(c) / n for c in END_CAUSES})
    return out


def bootstrap_gap(real: dict[str, list[float]], synthetic: dict[str, list[float]], n_boot: int = 2000,
                  seed: int = 0) -> tuple[float, float, float]:
    """Mean(synthetic) - mean(real) of per-episode outcomes grouped by task, and its 95% percentile interval
    from resampling tasks with replacement (both envs' episodes of a drawn task go together)."""
    tasks = sorted(set(real) & set(synthetic))
    if not tasks:
        return 0.0, 0.0, 0.0

    def gap(ts: Sequence[str]) -> float:
        r = [x for t in ts for x in real[t]]
        s = [x for t in ts for x in synthetic[t]]
        return sum(s) / max(1, len(s)) - sum(r) / max(1, len(r))

    rng = random.Random(seed)
    draws = sorted(gap([rng.choice(tasks) for _ in tasks]) for _ in range(n_boot))
    return gap(tasks), draws[int(0.025 * n_boot)], draws[min(n_boot - 1, int(0.975 * n_boot))]


def by_task(trajs: Sequence[Trajectory], value) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for t in trajs:
        out.setdefault(t.task.task_id, []).append(float(value(t)))
    return out


def score_open_loop(parsed: Sequence[ParsedStep], refs: Sequence[Transition], next_actions: Sequence[str | None],
                    reward_tol: float = 0.05, next_valid: Sequence[bool] | None = None) -> dict[str, float]:
    """Step-level agreement of predictions with the real steps (the judge's scores, `judge.score_steps`, plus
    terminal success and next-action recall); `next_actions[i]` is the action the policy took from
    refs[i].next_state (None after the last step) and `next_valid[i]` whether the real env accepted it:
    `action_recall` counts every next action, `action_recall_valid` only those the real env accepted (an
    action the real page does not offer either is not the model's miss)."""
    base = score_steps(parsed, refs, reward_tol)
    norm = lambda s: "".join(s.lower().split())  # noqa: E731
    pred_succ = [p.valid and p.done and p.reward >= 1.0 - 1e-6 for p in parsed]
    real_succ = [bool(t.done and t.info.get("success")) for t in refs]
    terminal = classification_report(pred_succ, real_succ)  # F1 NaN without a success on either side
    with_next = [(p, a) for p, a in zip(parsed, next_actions) if a is not None]
    listed = lambda p, a: p.valid and (not p.observation.admissible or  # noqa: E731
                                       norm(a) in {norm(x) for x in p.observation.admissible})
    recall = sum(1 for p, a in with_next if listed(p, a))
    valid = list(next_valid) if next_valid is not None else [True] * len(next_actions)
    with_valid = [(p, a) for p, a, v in zip(parsed, next_actions, valid) if a is not None and v]
    return {
        "open_loop/reward_agreement": base["experience/reward_agreement"],
        "open_loop/done_agreement": base["experience/done_agreement"],
        "open_loop/terminal_precision": terminal["precision"],
        "open_loop/terminal_recall": terminal["recall"],
        "open_loop/terminal_f1": terminal["f1"],
        "open_loop/action_recall": recall / max(1, len(with_next)),
        "open_loop/action_recall_valid": sum(1 for p, a in with_valid if listed(p, a)) / max(1, len(with_valid)),
        "open_loop/admissible_f1": base["experience/admissible_f1"],
        "open_loop/state_f1": base["experience/state_f1"],
        "open_loop/unparseable": base["experience/invalid_output_rate"],
        "open_loop/steps": float(len(refs)),
    }


def open_loop_steps(engine: GenerationEngine, trajs: Sequence[Trajectory], demos, fmt: ExperienceFormat,
                    max_new_tokens: int, max_steps: int | None = None, outcome: Outcome | None = None,
                    ending_check: Callable[[Task, Sequence[tuple[str, str]]], str | None] | None = None):
    """(parsed predictions, the real steps, the action the policy took next or None, whether the real env accepted
    it): real trajectories replayed through the experience model (greedy), with the real history and
    `demos(transition) -> retrieved demonstrations`; `outcome` judges the predicted endings' rewards and
    `ending_check(task, history)` rules successes out, as in the synthetic env."""
    parsed, refs = predict_steps(engine, trajs, demos, fmt, max_new_tokens, max_steps)
    ruled_out = None
    if ending_check is not None:
        hists = [traj.transitions[: j + 1] for traj in trajs for j in range(len(traj.transitions))][: len(refs)]
        ruled_out = [p.valid and p.done and ending_check(h[-1].task, [(t.state.text, t.action) for t in h]) is not None
                     for p, h in zip(parsed, hists)]
    parsed = judge_endings(parsed, [(t.task.instruction, t.state.text, t.action) for t in refs], outcome, ruled_out)
    following = [traj.transitions[j + 1] if j + 1 < len(traj.transitions) else None
                 for traj in trajs for j in range(len(traj.transitions))][: len(refs)]
    nxt = [f.action if f is not None else None for f in following]
    ok = [f is not None and not f.info.get("invalid") for f in following]
    return parsed, refs, nxt, ok


def open_loop(engine: GenerationEngine, trajs: Sequence[Trajectory], demos, fmt: ExperienceFormat,
              max_new_tokens: int, max_steps: int | None = None, outcome: Outcome | None = None,
              ending_check: Callable[[Task, Sequence[tuple[str, str]]], str | None] | None = None) -> dict[str, float]:
    """`score_open_loop` of `open_loop_steps`."""
    parsed, refs, nxt, ok = open_loop_steps(engine, trajs, demos, fmt, max_new_tokens, max_steps, outcome, ending_check)
    return score_open_loop(parsed, refs, nxt, next_valid=ok) if refs else {}

def closed_loop_report(real: Sequence[Trajectory], synthetic: Sequence[Trajectory], max_steps: int, ret,
                       seed: int = 0) -> dict[str, Any]:
    """The closed-loop keys of both envs, the success gap and its 95% interval (`ret(traj)`: the RL return)."""
    out: dict[str, Any] = {}
    for name, trajs in (("real", real), ("synthetic", synthetic)):
        for k, v in episode_report(trajs, max_steps, [ret(t) for t in trajs]).items():
            out[f"closed_loop/{k}_{name}"] = v
    out["closed_loop/real_success"] = out.pop("closed_loop/success_real")
    out["closed_loop/synthetic_success"] = out.pop("closed_loop/success_synthetic")
    gap, lo, hi = bootstrap_gap(by_task(real, lambda t: t.success), by_task(synthetic, lambda t: t.success), seed=seed)
    out.update({"closed_loop/success_gap": gap, "closed_loop/success_gap_lo": lo, "closed_loop/success_gap_hi": hi,
                "closed_loop/episodes": float(len(real))})
    return out
