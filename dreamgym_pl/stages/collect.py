"""collect: offline episodes of the env's scripted agents on the train tasks -> offline/transitions.jsonl."""

from __future__ import annotations

from dreamgym_pl import dist
from dreamgym_pl.agents import make_agent
from dreamgym_pl.core import Trajectory, write_jsonl
from dreamgym_pl.rollout.collector import episode_stats, run_episodes
from dreamgym_pl.stages.context import Run


def run_stage(run: Run) -> None:
    """Every agent starts at the same tasks, so the same tasks are played by several agents (DPO pairs,
    contrast for the experience model)."""
    cfg = run.cfg.collect
    tasks = run.env.tasks("train")
    all_trajs: list[Trajectory] = []
    for i, (name, count) in enumerate(cfg.agents.items()):
        if count <= 0:
            continue
        agent_tasks = [tasks[j % len(tasks)] for j in range(count)]
        agent = make_agent(name, seed=run.cfg.seed + i, eps=cfg.noisy_eps, env=run.env)
        trajs = run_episodes(run.env, agent_tasks, agent, batch_size=cfg.batch_size, source=name,
                             progress=f"collect {name}")
        for ep, t in enumerate(trajs):
            for s in t.transitions:
                s.info["episode"] = f"{name}-{ep}"
        stats = episode_stats(trajs)
        run.record({f"collect/{name}_success_rate": stats["success_rate"], f"collect/{name}_episodes": len(trajs)})
        all_trajs += trajs
    transitions = [s for t in all_trajs for s in t.transitions]
    if dist.is_main():
        write_jsonl(run.offline_path, transitions)
    run.record({"collect/real_transitions": len(transitions), "collect/real_resets": len(all_trajs)})
    run.complete("collect")
