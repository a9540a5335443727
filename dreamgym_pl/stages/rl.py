"""rl: GRPO/PPO against the real env from the current policy (the paper's real-env baselines); s2r reuses it.
Every iteration's real transitions join the run's replay buffer as `online` entries (`OnlineReplay`); the
buffer travels with the stage's checkpoints and is saved to replay/ at its end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dreamgym_pl import dist
from dreamgym_pl.experience.refresh import OnlineReplay
from dreamgym_pl.rollout.datamodule import RolloutDataModule
from dreamgym_pl.run import atomic_write_json, read_json
from dreamgym_pl.stages.callbacks import RLCheckpoint, RolloutSamples, TestCurve
from dreamgym_pl.stages.context import Run
from dreamgym_pl.stages.experience import load_replay, save_replay
from dreamgym_pl.stages.policy import (algorithm, checkpoints, finish_policy_stage, load_rl_checkpoint, plot_history,
                                       rank_report, rl_module, save_rl_checkpoint)


def stage_replay(run: Run, stage: str, vdir: Path | None) -> Any:
    """The replay buffer an RL stage starts from: its checkpoint's (`vdir`/replay, when resuming from one that
    has it), else the run's replay/ (empty where no stage made one)."""
    if vdir is not None and (vdir / "replay").exists():
        return load_replay(run, path=vdir / "replay", fix=checkpoints(run, stage).fix)
    return load_replay(run)


def save_online_replay(vdir: Path, buffer: Any, online: OnlineReplay) -> None:
    """What an RL stage's checkpoint holds beside the policy: the replay buffer and its count of added entries."""
    buffer.save(vdir / "replay")
    atomic_write_json(vdir / "online_replay.json", online.state_dict())


def real_rl(run: Run, stage: str, budget: int, tasks_per_iter: int, max_iters: int, budget_cap: bool = False) -> None:
    algo = algorithm(run)
    model, tok, state = load_rl_checkpoint(run, stage)
    vdir = state["dir"] if state else None
    buffer = stage_replay(run, stage, vdir)
    online = OnlineReplay(buffer, run.env.explain, stage)
    if vdir is not None and (vdir / "online_replay.json").exists():
        online.load_state_dict(read_json(vdir / "online_replay.json", checkpoints(run, stage).fix, keys=("added",)))
    module = rl_module(run, model, tok, algo, state)
    dm = RolloutDataModule(run.env, run.env.tasks("train"), algo, run.prompt_cfg, budget, tasks_per_iter, max_iters,
                           engine_factory=lambda m, t: run.engine_for("policy", m, t), action_env=run.env,
                           seed=run.cfg.seed, source="real", rollout_batch=run.cfg.rollout.batch_size,
                           budget_cap=budget_cap)

    def save(m: Any, d: Any) -> None:
        save_rl_checkpoint(run, stage, m, d, lambda v: save_online_replay(v, buffer, online))

    if budget_cap and budget > 0 and not state and dm.exhausted:  # e.g. more ranks than tasks fit: not a silent no-op
        raise ValueError(f"{stage}.real_budget: {budget} fits fewer tasks than the {dist.world()} ranks under "
                         f"{stage}.budget_cap (each task's episodes may take algo.group_size x env.max_steps "
                         f"transitions); raise it or set {stage}.budget_cap=false")
    if state:
        dm.load_state_dict(state)
    else:  # version 0: the stage's start; a resume reads its buffer, never replay/ (which the end rewrites)
        save(None, dm)
    ckpt = RLCheckpoint(save, run.cfg.checkpoint_every, state, checkpoints(run, stage).root / "progress.json",
                        bool(run.cfg.resume))
    callbacks = [ckpt, online,
                 RolloutSamples(run.cfg.rollout.samples_every),
                 TestCurve(run.evaluate, run.cfg.eval.curve_every, run.cfg.eval.curve_goals, run.cfg.eval.curve_split)]
    run.trainer(stage, callbacks, max_epochs=1, gradient_clip_val=algo.cfg.grad_clip).fit(module, datamodule=dm)
    save_replay(run, buffer)
    plot_history(run, stage, dm.history)
    rank_report(run, stage, dm, module)
    finish_policy_stage(run, stage, module, {
        f"{stage}/real_transitions": dm.consumed, f"{stage}/real_resets": dm.episodes,
        f"{stage}/iterations": dm.iteration, f"{stage}/redone_transitions": ckpt.redone,
        f"{stage}/transitions_per_s": dm.transitions_per_s, f"{stage}/replay_added": online.added,
        f"{stage}/replay_size": len(buffer)})


def run_stage(run: Run) -> None:
    c = run.cfg.rl
    real_rl(run, "rl", c.real_budget, c.tasks_per_iter, c.max_iters, c.budget_cap)
