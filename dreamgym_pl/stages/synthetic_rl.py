"""synthetic_rl (DreamGym): GRPO/PPO against the experience model, with the curriculum; consumes no real
transitions -> checkpoints/synthetic_rl, replay/ (enriched), curriculum/."""

from __future__ import annotations

from typing import Any

from dreamgym_pl import dist
from dreamgym_pl.core import Task, from_dict, iter_jsonl, write_jsonl
from dreamgym_pl.curriculum import Curriculum, CurriculumState
from dreamgym_pl.experience.format import STOP, TASK_STOP
from dreamgym_pl.experience.synthetic_env import SyntheticEnv
from dreamgym_pl.policy.algos import RLAlgorithm
from dreamgym_pl.rollout.datamodule import RolloutDataModule
from dreamgym_pl.rollout.sampling import SamplingParams
from dreamgym_pl.run import atomic_write_json, read_json
from dreamgym_pl.stages.callbacks import CurriculumLogs, RLCheckpoint, RolloutSamples, TestCurve
from dreamgym_pl.stages.context import Run
from dreamgym_pl.stages.experience import experience_format, load_replay, save_replay
from dreamgym_pl.stages.policy import (algorithm, finish_policy_stage, load_rl_checkpoint, plot_history, rank_report,
                                       rl_module, save_rl_checkpoint)


def initial_observation(env: Any, task: Task) -> Any:
    """The real env's first observation of a task (a fixed function of the task: no transition). A
    curriculum-generated task starts where its parent task starts, with its own instruction."""
    g = task.goal or {}
    if g.get("generated") and isinstance(g.get("parent_goal"), dict):
        task = Task(task.task_id, task.instruction, dict(g["parent_goal"]), task.parent_id, task.generation)
    return env.initial_observation(task)


def make_synthetic_env(run: Run, buffer: Any) -> SyntheticEnv:
    from dreamgym_pl.models import load_pretrained

    model, tok = load_pretrained(run.dir / run.state.get("experience", "checkpoints/experience"),
                                 run.cfg.model.get("dtype", "float32"))
    e = run.cfg.experience
    params = SamplingParams(temperature=e.temperature, max_new_tokens=e.max_new_tokens, stop=list(STOP))
    return SyntheticEnv(run.engine_for("experience", model, tok), buffer, experience_format(run),
                        lambda task: initial_observation(run.env, task), run.env.tasks, run.env.is_admissible, params,
                        max_steps=run.env.max_steps, invalid_action=e.invalid_action,
                        invalid_observation=run.env.invalid_observation)


def make_curriculum(run: Run, senv: SyntheticEnv, algo: RLAlgorithm) -> Curriculum:
    """The curriculum, its task generator the experience model (prompted as M_task); resumed from curriculum/."""
    c = run.cfg.curriculum
    # room for the tags and punctuation around max_words words
    params = SamplingParams(temperature=c.temperature, max_new_tokens=c.max_words + 8, stop=list(TASK_STOP))
    embed = None
    if algo.needs_task_embedder:  # e.g. PPO, which has no groups
        from dreamgym_pl.replay.embed import make_embedder

        embed = make_embedder(run.cfg.replay.embedder, run.cfg.replay.dim).embed
    state = None
    sdir = run.dir / "curriculum"
    if run.cfg.resume and (sdir / "state.json").exists():
        raw = read_json(sdir / "state.json")
        gen_file = sdir / "generated_tasks.jsonl"
        gen = [from_dict(Task, d) for d in iter_jsonl(gen_file)] if gen_file.exists() else []
        state = CurriculumState(values=raw["values"], generated=gen, rejected=raw["rejected"], shares=raw["shares"])
    return Curriculum(run.env.tasks("train"), lambda prompts: [x.text for x in senv.engine.generate(prompts, params)],
                      lambda trajs: algo.task_values(trajs, embed, c.num_clusters), c.lambda_, c.min_variance,
                      c.num_seeds, run.cfg.synthetic_rl.tasks_per_iter, run.cfg.seed, c.max_words, state)


def save_curriculum(run: Run, cur: Curriculum) -> None:
    if not dist.is_main():
        return
    sdir = run.dir / "curriculum"
    st = cur.state
    atomic_write_json(sdir / "state.json", {"values": st.values, "rejected": st.rejected, "shares": st.shares})
    write_jsonl(sdir / "generated_tasks.jsonl", st.generated)


def run_stage(run: Run) -> None:
    algo = algorithm(run)
    cfg = run.cfg.synthetic_rl
    buffer = load_replay(run)
    senv = make_synthetic_env(run, buffer)
    model, tok, state = load_rl_checkpoint(run, "synthetic_rl")
    module = rl_module(run, model, tok, algo, state)
    cur = make_curriculum(run, senv, algo)
    senv.defer_enrich = dist.world() > 1
    dm = RolloutDataModule(senv, run.env.tasks("train"), algo, run.prompt_cfg, cfg.synthetic_budget, cfg.tasks_per_iter,
                           cfg.max_iters, engine_factory=lambda m, t: run.engine_for("policy", m, t), action_env=run.env,
                           seed=run.cfg.seed, source="synthetic", task_sampler=cur.sample,
                           rollout_batch=run.cfg.rollout.batch_size)
    if state:
        dm.load_state_dict(state)

    def save(m: Any, st: dict) -> None:
        save_rl_checkpoint(run, "synthetic_rl", m, st, lambda: (save_replay(run, buffer), save_curriculum(run, cur)))

    callbacks = [RLCheckpoint(save, run.cfg.checkpoint_every, state), CurriculumLogs(cur, senv),
                 RolloutSamples(run.cfg.rollout.samples_every),
                 TestCurve(run.evaluate, run.cfg.eval.curve_every, run.cfg.eval.curve_goals)]
    run.trainer("synthetic_rl", callbacks, max_epochs=1, gradient_clip_val=algo.cfg.grad_clip).fit(module, datamodule=dm)
    save_replay(run, buffer)
    save_curriculum(run, cur)
    shares = cur.state.shares
    run.record({"curriculum/synthetic_share": sum(shares) / max(1, len(shares)),
                "curriculum/max_share": max(shares) if shares else 0.0,
                "curriculum/num_generated": len(cur.state.generated), "curriculum/rejected": cur.state.rejected})
    plot_history(run, "synthetic_rl", dm.history)
    rank_report(run, "synthetic_rl", dm, module, replay_size=len(buffer), own_unique=len(senv.own_digests))
    st = senv.stats
    gen = max(st["generate_s"], 1e-9)
    finish_policy_stage(run, "synthetic_rl", module, {
        "synthetic_rl/real_transitions": 0, "synthetic_rl/synthetic_transitions": dm.consumed,
        "synthetic_rl/iterations": dm.iteration, "synthetic_rl/transitions_per_s": dm.transitions_per_s,
        "synthetic_rl/invalid_output_rate": st["invalid_outputs"] / max(1, st["steps"]),
        "synthetic_rl/overhead_share": (st["retrieval_s"] + st["prompt_s"] + st["parse_s"]) / gen,
        "synthetic_rl/replay_size": len(buffer)})
    run.add_budget("synthetic_transitions", dm.consumed)
    run.add_budget("real_transitions", 0)
