"""collect: offline episodes of the env's scripted agents on the train tasks -> offline/transitions.jsonl."""

from __future__ import annotations

from dreamgym_pl import dist
from dreamgym_pl.agents import make_agent
from dreamgym_pl.core import Trajectory, write_jsonl
from dreamgym_pl.rollout.collector import episode_stats, run_episodes
from dreamgym_pl.stages.context import Run


def play_agents(run: Run, agents: dict, tasks: list, seed: int, tag: str = "",
                progress: str = "collect") -> list[tuple[str, list[Trajectory]]]:
    """(name, episodes) of each scripted agent with a positive count: agent i (seeded `seed + i`) plays `count` episodes
    cycling over `tasks` from the first; each transition's `info["episode"]` is `<tag><name>-<k>`."""
    out = []
    for i, (name, count) in enumerate(agents.items()):
        if int(count) <= 0:
            continue
        agent = make_agent(name, seed=seed + i, eps=run.cfg.collect.noisy_eps, env=run.env)
        trajs = run_episodes(run.env, [tasks[j % len(tasks)] for j in range(int(count))], agent,
                             batch_size=run.cfg.collect.batch_size, source=name, progress=f"{progress} {name}")
        for ep, t in enumerate(trajs):
            for s in t.transitions:
                s.info["episode"] = f"{tag}{name}-{ep}"
        out.append((name, trajs))
    return out


def run_stage(run: Run) -> None:
    """Every agent starts at the same tasks, so the same tasks are played by several agents (DPO pairs,
    contrast for the experience model)."""
    all_trajs: list[Trajectory] = []
    for name, trajs in play_agents(run, run.cfg.collect.agents, run.env.tasks("train"), run.cfg.seed):
        stats = episode_stats(trajs)
        run.record({f"collect/{name}_success_rate": stats["success_rate"], f"collect/{name}_episodes": len(trajs)})
        all_trajs += trajs
    transitions = [s for t in all_trajs for s in t.transitions]
    if dist.is_main():
        write_jsonl(run.offline_path, transitions)
    run.record({"collect/real_transitions": len(transitions), "collect/real_resets": len(all_trajs)})
    run.complete("collect")
