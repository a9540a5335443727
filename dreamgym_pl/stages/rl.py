"""rl: GRPO/PPO against the real env from the current policy (the paper's real-env baselines); s2r reuses it."""

from __future__ import annotations

from dreamgym_pl.rollout.datamodule import RolloutDataModule
from dreamgym_pl.stages.callbacks import RLCheckpoint, RolloutSamples, TestCurve
from dreamgym_pl.stages.context import Run
from dreamgym_pl.stages.policy import (algorithm, checkpoints, finish_policy_stage, load_rl_checkpoint, plot_history,
                                       rank_report, rl_module, save_rl_checkpoint)


def real_rl(run: Run, stage: str, budget: int, tasks_per_iter: int, max_iters: int) -> None:
    algo = algorithm(run)
    model, tok, state = load_rl_checkpoint(run, stage)
    module = rl_module(run, model, tok, algo, state)
    dm = RolloutDataModule(run.env, run.env.tasks("train"), algo, run.prompt_cfg, budget, tasks_per_iter, max_iters,
                           engine_factory=lambda m, t: run.engine_for("policy", m, t), action_env=run.env,
                           seed=run.cfg.seed, source="real", rollout_batch=run.cfg.rollout.batch_size)
    if state:
        dm.load_state_dict(state)
    ckpt = RLCheckpoint(lambda m, d: save_rl_checkpoint(run, stage, m, d), run.cfg.checkpoint_every, state,
                        checkpoints(run, stage).root / "progress.json", bool(run.cfg.resume))
    callbacks = [ckpt,
                 RolloutSamples(run.cfg.rollout.samples_every),
                 TestCurve(run.evaluate, run.cfg.eval.curve_every, run.cfg.eval.curve_goals)]
    run.trainer(stage, callbacks, max_epochs=1, gradient_clip_val=algo.cfg.grad_clip).fit(module, datamodule=dm)
    plot_history(run, stage, dm.history)
    rank_report(run, stage, dm, module)
    finish_policy_stage(run, stage, module, {
        f"{stage}/real_transitions": dm.consumed, f"{stage}/real_resets": dm.episodes, f"{stage}/iterations": dm.iteration,
        f"{stage}/redone_transitions": ckpt.redone, f"{stage}/transitions_per_s": dm.transitions_per_s})


def run_stage(run: Run) -> None:
    c = run.cfg.rl
    real_rl(run, "rl", c.real_budget, c.tasks_per_iter, c.max_iters)
