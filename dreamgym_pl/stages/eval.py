"""eval: the current policy (or a scripted agent) on the fixed tasks of `eval.split` -> eval/* metrics and each
goal's outcome in eval/<split>_outcomes.jsonl (for paired comparisons: experiments/compare_runs.py); for the
policy also the first `eval.val_goals` val tasks -> eval/val_* and eval/val_outcomes.jsonl (what tuning reads;
test is reported only)."""

from __future__ import annotations

import logging

from dreamgym_pl import dist
from dreamgym_pl.agents import make_agent
from dreamgym_pl.outcomes import outcome_rows, write_outcomes
from dreamgym_pl.rollout.collector import episode_stats, run_episodes
from dreamgym_pl.stages.context import Run
from dreamgym_pl.stages.policy import val_metrics

log = logging.getLogger("dreamgym_pl")


def run_stage(run: Run) -> None:
    cfg = run.cfg.eval
    tasks = run.env.tasks(cfg.split)[: cfg.num_goals]
    val: dict[str, float] = {}
    outcomes = run.dir / "eval" / f"{cfg.split}_outcomes.jsonl"
    if cfg.agent == "policy":
        model, tok = run.load_policy()
        val = val_metrics(run, model, tok, "eval", outcomes=run.dir / "eval" / "val_outcomes.jsonl")
        res = run.evaluate(model, tok, progress="eval", outcomes=outcomes)
    else:
        agent = make_agent(cfg.agent, seed=run.cfg.seed, eps=run.cfg.collect.noisy_eps, env=run.env)
        trajs = run_episodes(run.env, tasks, agent, batch_size=cfg.batch_size, source=cfg.agent,
                             progress=f"eval {cfg.agent}")
        if dist.is_main():  # every rank plays all goals with a scripted agent
            write_outcomes(outcomes, outcome_rows(trajs))
        res = episode_stats(trajs)
    run.record({**val, "eval/success_rate": res["success_rate"], "eval/mean_score": res["mean_score"],
                "eval/invalid_action_rate": res["invalid_action_rate"], "eval/num_goals": len(tasks)})
    log.info("eval (%s, %d %s goals): success %.3f, mean score %.3f", cfg.agent, len(tasks), cfg.split,
             res["success_rate"], res["mean_score"])
    run.complete("eval")
