"""Fidelity of the experience model against the real environment.

- step level, on held-out real transitions: the model predicts (next state, reward, done) from the real
  (history, state, action); we score reward agreement (|r - r*| <= tol), done agreement, admissible-action
  F1 and next-state token F1, and count unparseable outputs.

Pure scoring functions are separate from the model calls so that they can be unit-tested.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Sequence

from dreamgym_pl.core import Trajectory, Transition
from dreamgym_pl.experience.format import STOP, ExperienceFormat, build_prompt, parse_output
from dreamgym_pl.replay.buffer import ReplayBuffer
from dreamgym_pl.rollout.sampling import GenerationEngine, SamplingParams


def _toks(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+|[^\sa-z0-9]", text.lower())


def token_f1(pred: str, ref: str) -> float:
    p, r = Counter(_toks(pred)), Counter(_toks(ref))
    if not p and not r:
        return 1.0
    common = sum((p & r).values())
    if common == 0:
        return 0.0
    prec, rec = common / sum(p.values()), common / sum(r.values())
    return 2 * prec * rec / (prec + rec)


def set_f1(pred: Sequence[str], ref: Sequence[str]) -> float:
    norm = lambda s: "".join(s.lower().split())  # noqa: E731
    p, r = {norm(x) for x in pred}, {norm(x) for x in ref}
    if not p and not r:
        return 1.0
    tp = len(p & r)
    if tp == 0:
        return 0.0
    return 2 * tp / (len(p) + len(r))


def predict_steps(engine: GenerationEngine, trajs: Sequence[Trajectory], demos: Callable[[Transition], list],
                  fmt: ExperienceFormat, max_new_tokens: int, max_steps: int | None = None) -> tuple[list, list]:
    """(parsed greedy predictions, the real steps they predict) for the first `max_steps` steps of `trajs`,
    each prompted with its real history and `demos(step)`."""
    prompts, refs = [], []
    for traj in trajs:
        hist: list[tuple[str, str]] = []
        for t in traj.transitions:
            prompts.append(build_prompt(t.task.instruction, hist, demos(t), t.state, t.action, fmt))
            refs.append(t)
            hist.append((t.state.text, t.action))
    if max_steps is not None:
        prompts, refs = prompts[:max_steps], refs[:max_steps]
    if not prompts:
        return [], []
    comps = engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=list(STOP)))
    return [parse_output(c.text) for c in comps], refs


def predict_last_steps(engine: GenerationEngine, trajs: Sequence[Trajectory], demos: Callable[[Transition], list],
                       fmt: ExperienceFormat, max_new_tokens: int) -> list:
    """Parsed greedy predictions of each trajectory's last step, prompted with its real history and
    `demos(step)` (the steps that decide an episode's reward: a purchase, a win)."""
    prompts = []
    for traj in trajs:
        hist = [(t.state.text, t.action) for t in traj.transitions[:-1]]
        t = traj.transitions[-1]
        prompts.append(build_prompt(t.task.instruction, hist, demos(t), t.state, t.action, fmt))
    if not prompts:
        return []
    comps = engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=list(STOP)))
    return [parse_output(c.text) for c in comps]


def judge_steps(engine: GenerationEngine, trajs: Sequence[Trajectory], buffer: ReplayBuffer | None,
                fmt: ExperienceFormat, max_steps: int | None = 200, reward_tol: float = 0.05,
                max_new_tokens: int = 200) -> dict[str, float]:
    from dreamgym_pl.experience.module import demos_for

    parsed, refs = predict_steps(engine, trajs, lambda t: demos_for(buffer, t, fmt), fmt, max_new_tokens, max_steps)
    return score_steps(parsed, refs, reward_tol) if refs else {}


def score_steps(parsed: Sequence, refs: Sequence[Transition], reward_tol: float = 0.05) -> dict[str, float]:
    n = len(refs)
    ra = sum(1 for p, t in zip(parsed, refs) if p.valid and abs(p.reward - t.reward) <= reward_tol)
    da = sum(1 for p, t in zip(parsed, refs) if p.valid and p.done == t.done)
    f1 = sum(set_f1(p.observation.admissible, t.next_state.admissible) for p, t in zip(parsed, refs) if p.valid)
    sf = sum(token_f1(p.observation.text, t.next_state.text) for p, t in zip(parsed, refs) if p.valid)
    term = [(p, t) for p, t in zip(parsed, refs) if t.done]
    term_ra = sum(1 for p, t in term if p.valid and abs(p.reward - t.reward) <= reward_tol)
    return {
        "experience/reward_agreement": ra / n,
        "experience/done_agreement": da / n,
        "experience/admissible_f1": f1 / n,
        "experience/state_f1": sf / n,
        "experience/invalid_output_rate": sum(1 for p in parsed if not p.valid) / n,
        "experience/terminal_reward_agreement": term_ra / max(1, len(term)),
        "experience/judged_steps": float(n),
    }


def verdict_counts(parsed: Sequence, real_rewards: Sequence[float], reward_tol: float = 0.05) -> dict[str, float]:
    """How predicted episode-ending steps judge the outcome: counts of real failures (reward < 1) and successes,
    how many of each the model calls a success (a valid prediction with reward >= 1), how many predicted rewards
    are within `reward_tol` of the real one, and `accuracy`: the share whose success verdict is right (an
    unparseable prediction is a wrong verdict)."""
    said = [p.valid and p.reward >= 1.0 for p in parsed]
    real = [r >= 1.0 for r in real_rewards]
    right = sum(1 for s, r, p in zip(said, real, parsed) if p.valid and s == r)
    return {"failed": float(sum(1 for r in real if not r)), "successful": float(sum(real)),
            "failed_judged_success": float(sum(1 for s, r in zip(said, real) if s and not r)),
            "successful_judged_success": float(sum(1 for s, r in zip(said, real) if s and r)),
            "reward_agrees": float(sum(1 for p, r in zip(parsed, real_rewards)
                                       if p.valid and abs(p.reward - r) <= reward_tol)),
            "accuracy": right / max(1, len(real))}
