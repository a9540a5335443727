"""synthetic_rl (DreamGym): GRPO/PPO against the experience model, with the curriculum -> checkpoints/synthetic_rl,
replay/ (enriched), curriculum/. Its real interactions are measured, not assumed: the real env it holds is an
EnvMeter (synthetic_rl/real_transitions: steps, 0 unless a change steps it), and the first observation of each
start task is fetched once and stored (synthetic_rl/real_resets). With `experience.refresh_every` > 0 the
experience model is refreshed on the policy's real episodes every N iterations (experience/refresh.py): their
real steps go through the same EnvMeter, into the buffer, and the refreshed model is saved as
checkpoints/experience_refreshed (the run's experience model from then on). A checkpoint holds the replay buffer,
the curriculum (random state included), the stored first observations, the synthetic env's and the meter's
counters, and with a refresh the experience model and the refresh's counters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dreamgym_pl import dist
from dreamgym_pl.core import Task, from_dict, iter_jsonl, write_jsonl
from dreamgym_pl.curriculum import Curriculum, CurriculumState
from dreamgym_pl.experience.format import STOP, TASK_STOP
from dreamgym_pl.experience.refresh import ExperienceRefresh
from dreamgym_pl.experience.synthetic_env import SyntheticEnv
from dreamgym_pl.policy.algos import RLAlgorithm
from dreamgym_pl.precision import loop_precision
from dreamgym_pl.rollout.datamodule import RolloutDataModule
from dreamgym_pl.rollout.sampling import SamplingParams
from dreamgym_pl.envs.base import root_goal
from dreamgym_pl.envs.meter import EnvMeter, StoredStarts
from dreamgym_pl.run import atomic_write_json, read_json, reading
from dreamgym_pl.stages.callbacks import CurriculumLogs, RLCheckpoint, RolloutSamples, TestCurve
from dreamgym_pl.stages.context import Run
from dreamgym_pl.stages.experience import (experience_format, experience_model_cfg, load_replay, save_experience,
                                          save_replay)
from dreamgym_pl.stages.policy import (algorithm, checkpoints, finish_policy_stage, load_rl_checkpoint, plot_history,
                                       rank_report, rl_module, save_rl_checkpoint)


def start_task(task: Task) -> Task:
    """The task whose real first observation `task` has: a curriculum-generated task starts where its parent
    starts (its root parent's goal, however deep the lineage), with its own instruction."""
    g = task.goal or {}
    if g.get("generated") and isinstance(g.get("parent_goal"), dict):
        return Task(task.task_id, task.instruction, dict(root_goal(g)), task.parent_id, task.generation)
    return task


def initial_observation(env: Any, task: Task) -> Any:
    """The real env's first observation of a task (a fixed function of the task: no transition)."""
    return env.initial_observation(start_task(task))


def stored_starts(run: Run) -> StoredStarts:
    """The real env's first observations, fetched once per start task through a metered real env."""
    return StoredStarts(EnvMeter(run.env), start_task)


def load_experience(run: Run, vdir: Path | None = None) -> tuple[Any, Any]:
    """The experience model and tokenizer: a synthetic_rl checkpoint's refreshed one (`vdir`/experience, when it
    has one), else the run's (`run.state["experience"]`)."""
    from dreamgym_pl.models import load_pretrained

    if vdir is not None and (vdir / "experience").is_dir():
        path, fix = vdir / "experience", checkpoints(run, "synthetic_rl").fix
    else:
        path = run.dir / run.state.get("experience", "checkpoints/experience")
        fix = ("rerun with resume=false, or drop experience and the stages after it from stages.json's completed "
               "list (the experience stage makes it again)")
    with reading(path, fix):
        return load_pretrained(path, experience_model_cfg(run.cfg)["dtype"])


def make_synthetic_env(run: Run, buffer: Any, starts: StoredStarts,
                       experience: tuple[Any, Any] | None = None) -> SyntheticEnv:
    """The synthetic env over `experience` (model, tokenizer; default: the run's experience model), its
    endings' rewards judged by the run's outcome model (`experience.outcome_model`; none: the experience model's)."""
    from dreamgym_pl.stages.outcome_model import load_outcome

    model, tok = experience or load_experience(run)
    e = run.cfg.experience
    params = SamplingParams(temperature=e.temperature, max_new_tokens=e.max_new_tokens, stop=list(STOP))
    return SyntheticEnv(run.engine_for("experience", model, tok), buffer, experience_format(run),
                        starts, starts.meter.tasks, starts.meter.is_admissible, params,
                        max_steps=run.env.max_steps, invalid_action=e.invalid_action,
                        invalid_observation=starts.meter.invalid_observation, outcome=load_outcome(run),
                        ending_check=run.env.ending_check if e.ending_rules else None)


def task_generation_params(c: Any) -> SamplingParams:
    """How the task generator samples (`curriculum` config): its temperature, room for the tags and punctuation
    around `max_words` words, stopping at the closing task tag."""
    return SamplingParams(temperature=c.temperature, max_new_tokens=c.max_words + 8, stop=list(TASK_STOP))


def make_curriculum(run: Run, senv: SyntheticEnv, algo: RLAlgorithm, sdir: Path | None) -> Curriculum:
    """The curriculum, its task generator the experience model (prompted as M_task); resumed from `sdir` (a
    checkpoint's curriculum/), random state included."""
    c = run.cfg.curriculum
    params = task_generation_params(c)
    embed = None
    if algo.needs_task_embedder:  # e.g. PPO, which has no groups
        from dreamgym_pl.replay.embed import make_embedder

        embed = make_embedder(run.cfg.replay.embedder, run.cfg.replay.dim).embed
    state, raw = None, None
    if sdir is not None:
        fix = checkpoints(run, "synthetic_rl").fix
        raw = read_json(sdir / "state.json", fix, keys=("values", "rejected", "shares", "rng"))
        with reading(sdir / "generated_tasks.jsonl", fix):
            gen = [from_dict(Task, d) for d in iter_jsonl(sdir / "generated_tasks.jsonl")]
        counts = {k: int(raw.get(k, 0)) for k in ("attempts", "valid", "new", "accepted")}  # 0 in older checkpoints
        state = CurriculumState(values=raw["values"], generated=gen, rejected=raw["rejected"], shares=raw["shares"],
                                uses={k: int(v) for k, v in raw.get("uses", {}).items()}, **counts)  # {} in older ones
    cur = Curriculum(run.env.tasks("train"), lambda prompts: [x.text for x in senv.engine.generate(prompts, params)],
                     lambda trajs: algo.task_values(trajs, embed, c.num_clusters), c.lambda_, c.min_variance,
                     c.num_seeds, run.cfg.synthetic_rl.tasks_per_iter, run.cfg.seed, c.max_words, state,
                     held_out=[t.instruction for split in ("val", "test") for t in run.env.tasks(split)],
                     check_task=run.env.check_generated_task, max_uses=c.max_uses,
                     family=run.env.task_family, family_mode=c.family)
    if raw is not None:
        version, internal, gauss = raw["rng"]
        cur.rng.setstate((version, tuple(internal), gauss))
    return cur


def save_curriculum(sdir: Path, cur: Curriculum) -> None:
    """The curriculum's state (random state included) and generated tasks into `sdir`."""
    st = cur.state
    atomic_write_json(sdir / "state.json", {"values": st.values, "rejected": st.rejected, "shares": st.shares,
                                            "attempts": st.attempts, "valid": st.valid, "new": st.new,
                                            "accepted": st.accepted, "uses": st.uses,
                                            "rng": list(cur.rng.getstate())})
    write_jsonl(sdir / "generated_tasks.jsonl", st.generated)


def save_extras(vdir: Path, buffer: Any, cur: Curriculum, senv: SyntheticEnv, starts: StoredStarts,
                refresh: ExperienceRefresh | None = None, experience: tuple[Any, Any] | None = None) -> None:
    """What synthetic RL adds to a checkpoint (and to the run directory at its end); with a refresh, the
    experience model as it is now and the refresh's counters."""
    from dreamgym_pl.models import save_model

    buffer.save(vdir / "replay")
    save_curriculum(vdir / "curriculum", cur)
    extra: dict[str, Any] = {}
    if refresh is not None:
        save_model(*experience, vdir / "experience")
        extra["refresh"] = refresh.state_dict()
    atomic_write_json(vdir / "synthetic_env.json", {"stats": senv.stats, "own_digests": sorted(senv.own_digests),
                                                    "starts": starts.state_dict(),
                                                    "meter": {"resets": starts.meter.resets,
                                                              "transitions": starts.meter.transitions}, **extra})


def refresh_pool(run: Run) -> list[Task]:
    """The train tasks a refresh plays: those the offline data cover (the experience model knows them; the
    fidelity benchmark's unseen train tasks stay unseen), else every train task."""
    seen = dict.fromkeys(t.task.task_id for t in run.offline_trajectories())
    pool = [t for t in run.env.tasks("train") if t.task_id in seen]
    return pool or run.env.tasks("train")


def make_refresh(run: Run, algo: RLAlgorithm, module: Any, meter: EnvMeter, experience: tuple[Any, Any],
                 buffer: Any) -> ExperienceRefresh | None:
    """The experience model's refresh (None when `experience.refresh_every` is 0): the current policy, sampled as
    in RL, plays `refresh_episodes` tasks of `refresh_pool` in the metered real env (this rank's share); the
    experience model is fine-tuned on them for `refresh_steps` steps and pushed to its engine."""
    from dreamgym_pl.experience.refresh import finetune, refresh_rng, refresh_tasks
    from dreamgym_pl.rollout.actor import policy_actor
    from dreamgym_pl.rollout.collector import run_episodes

    e = run.cfg.experience
    if e.refresh_every <= 0:
        return None
    pool, a = refresh_pool(run), algo.cfg
    model, tok = experience

    def collect(iteration: int) -> list:
        torch.manual_seed(refresh_rng(run.cfg.seed, iteration).randrange(2 ** 62))  # the policy's sampling
        tasks = dist.shard(refresh_tasks(pool, e.refresh_episodes, run.cfg.seed, iteration))
        engine = run.engine_for("policy", module.model, module.tokenizer)
        actor = policy_actor(engine, run.prompt_cfg, run.env, a.temperature, a.max_new_tokens, a.top_p)
        trajs = run_episodes(meter, tasks, actor, batch_size=run.cfg.rollout.batch_size, source="online")
        if hasattr(engine, "sleep"):
            engine.sleep()
        return trajs

    def learn(trajs: list, iteration: int) -> list[float]:
        losses = finetune(model, tok, trajs, experience_format(run), buffer, e.refresh_steps, e.refresh_lr,
                          e.batch_size, refresh_rng(run.cfg.seed, iteration).randrange(2 ** 62), e.grad_clip,
                          e.terminal_repeat, run.cfg.micro_batches, loop_precision(run.cfg, model))
        run.engine_for("experience", model, tok)  # the synthetic env's engine generates from the new weights
        return losses

    return ExperienceRefresh(e.refresh_every, buffer, run.env.explain, collect, learn)


def run_stage(run: Run) -> None:
    algo = algorithm(run)
    cfg = run.cfg.synthetic_rl
    model, tok, state = load_rl_checkpoint(run, "synthetic_rl")
    vdir = state["dir"] if state else None
    starts = stored_starts(run)
    if vdir is None:
        buffer = load_replay(run)
    else:
        fix = checkpoints(run, "synthetic_rl").fix
        buffer = load_replay(run, path=vdir / "replay", fix=fix)
        raw = read_json(vdir / "synthetic_env.json", fix, keys=("stats", "own_digests", "starts"))
    experience = load_experience(run, vdir)
    senv = make_synthetic_env(run, buffer, starts, experience)
    if vdir is not None:
        senv.stats.update(raw["stats"])
        senv.own_digests = set(raw["own_digests"])
        starts.load_state_dict(raw["starts"])
        meter = raw.get("meter") or {"resets": starts.fetched, "transitions": 0}  # (a checkpoint made before it)
        starts.meter.resets, starts.meter.transitions = int(meter["resets"]), int(meter["transitions"])
    module = rl_module(run, model, tok, algo, state)
    refresh = make_refresh(run, algo, module, starts.meter, experience, buffer)
    if refresh is not None and vdir is not None and raw.get("refresh") is not None:
        refresh.load_state_dict(raw["refresh"])
    cur = make_curriculum(run, senv, algo, vdir / "curriculum" if vdir is not None else None)
    senv.defer_enrich = dist.world() > 1
    dm = RolloutDataModule(senv, run.env.tasks("train"), algo, run.prompt_cfg, cfg.synthetic_budget, cfg.tasks_per_iter,
                           cfg.max_iters, engine_factory=lambda m, t: run.engine_for("policy", m, t), action_env=run.env,
                           seed=run.cfg.seed, source="synthetic", task_sampler=cur.sample,
                           rollout_batch=run.cfg.rollout.batch_size)
    def save(m: Any, d: Any) -> None:
        save_rl_checkpoint(run, "synthetic_rl", m, d,
                           lambda v: save_extras(v, buffer, cur, senv, starts, refresh, experience))

    if state:
        dm.load_state_dict(state)
    else:  # version 0: the stage's start (the replay buffer and curriculum it began from)
        save(None, dm)
    ckpt = RLCheckpoint(save, run.cfg.checkpoint_every, state, checkpoints(run, "synthetic_rl").root / "progress.json",
                        bool(run.cfg.resume))
    callbacks = [ckpt, CurriculumLogs(cur, senv),
                 RolloutSamples(run.cfg.rollout.samples_every),
                 TestCurve(run.evaluate, run.cfg.eval.curve_every, run.cfg.eval.curve_goals, run.cfg.eval.curve_split)]
    if refresh is not None:
        callbacks.append(refresh)
    run.trainer("synthetic_rl", callbacks, max_epochs=1, gradient_clip_val=algo.cfg.grad_clip).fit(module, datamodule=dm)
    save_replay(run, buffer)
    if dist.is_main():
        save_curriculum(run.dir / "curriculum", cur)
    shares = cur.state.shares
    run.record({"curriculum/synthetic_share": sum(shares) / max(1, len(shares)),
                "curriculum/max_share": max(shares) if shares else 0.0,
                "curriculum/num_generated": len(cur.state.generated), "curriculum/rejected": cur.state.rejected,
                **cur.totals()})
    plot_history(run, "synthetic_rl", dm.history)
    rank_report(run, "synthetic_rl", dm, module, replay_size=len(buffer), own_unique=len(senv.own_digests))
    if refresh is not None:  # the refreshed experience model is the run's from now on
        run.state["experience"] = save_experience(run, *experience, "experience_refreshed")
        run.record(refresh.metrics())
    st = senv.stats
    gen = max(st["generate_s"], 1e-9)
    finish_policy_stage(run, "synthetic_rl", module, {
        "synthetic_rl/real_transitions": starts.meter.transitions, "synthetic_rl/real_resets": starts.meter.resets,
        "synthetic_rl/synthetic_transitions": dm.consumed, "synthetic_rl/redone_transitions": ckpt.redone,
        "synthetic_rl/iterations": dm.iteration, "synthetic_rl/transitions_per_s": dm.transitions_per_s,
        "synthetic_rl/invalid_output_rate": st["invalid_outputs"] / max(1, st["steps"]),
        "synthetic_rl/overhead_share": (st["retrieval_s"] + st["prompt_s"] + st["parse_s"]) / gen,
        "synthetic_rl/replay_size": len(buffer),
        # demonstrations shown to the experience model, by the part of the buffer they came from
        **{f"replay/reads_{src}": float(st.get(f"reads_{src}", 0)) for src in ("offline", "online", "synthetic")},
        # predicted endings whose success the env's ending rules overturned (experience.ending_rules)
        **({"synthetic_rl/ending_ruled_out_share": st["ending_ruled_out"] / max(1, st["endings"])}
           if "endings" in st else {}),
        # the outcome model's verdicts on the endings the experience model predicted (experience.outcome_model)
        **({"synthetic_rl/outcome_judged": st["outcome_judged"],
            "synthetic_rl/outcome_success_share": st["outcome_success"] / max(1, st["outcome_judged"]),
            "synthetic_rl/outcome_overruled_share": st["outcome_overruled"] / max(1, st["outcome_judged"])}
           if st.get("outcome_judged") else {})})
