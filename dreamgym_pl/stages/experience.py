"""experience: annotate offline transitions with the env's reasoning traces, seed the replay buffer, train the
experience model (paper Eq. 4-5, with task-generation examples: M_task shares its parameters), train the outcome
model on the offline endings (`experience.outcome_model`, stages/outcome_model.py), judge both on held-out real
trajectories and on the SFT policy's episodes -> checkpoints/experience, checkpoints/outcome, replay/."""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path
from typing import Any

from dreamgym_pl import dist
from dreamgym_pl.curriculum import task_generation_prompt, task_generation_target, variation_pairs
from dreamgym_pl.experience.annotate import annotate
from dreamgym_pl.experience.format import ExperienceFormat, target_length_report
from dreamgym_pl.model_files import is_model_file, model_file
from dreamgym_pl.policy.samples import StepSample
from dreamgym_pl.stages.resume import fit, seed_stage
from dreamgym_pl.stages.context import Run
from dreamgym_pl.stages.outcome_model import report as outcome_report
from dreamgym_pl.stages.outcome_model import train_outcome

log = logging.getLogger("dreamgym_pl")


def experience_format(run: Run) -> ExperienceFormat:
    e = run.cfg.experience
    return ExperienceFormat(history=e.history, k=run.cfg.replay.k, demo_words=e.demo_words,
                            state_words=e.state_words,
                            reasoning=e.reasoning, exclude=run.cfg.replay.exclude, overfetch=run.cfg.replay.overfetch,
                            synthetic_demos=run.cfg.replay.synthetic_demos, online_k=run.cfg.replay.online_k,
                            max_prompt_tokens=e.max_prompt_tokens, max_target_tokens=e.max_target_tokens)


def load_replay(run: Run, fresh: bool = False, path: Path | None = None, fix: str | None = None):
    """The run's replay buffer (replay/, or `path`), or an empty one (always with `fresh`); a damaged saved
    buffer raises CorruptFileError saying `fix`."""
    from dreamgym_pl.replay.buffer import ReplayBuffer
    from dreamgym_pl.replay.embed import make_embedder

    emb = make_embedder(run.cfg.replay.embedder, run.cfg.replay.dim)
    path = path or run.dir / "replay"
    if path != run.dir / "replay" or (not fresh and (path / "CURRENT").exists()):
        buf = ReplayBuffer.load(path, emb, fix or f"rerun with resume=false (the replay buffer is made by the "
                                                  f"experience stage: or delete {path} and drop experience and "
                                                  f"the stages after it from stages.json's completed list)")
    else:
        buf = ReplayBuffer(emb, capacity=run.cfg.replay.capacity, max_size=run.cfg.replay.max_size)
    return buf


def save_replay(run: Run, buffer: Any) -> None:
    if dist.is_main():
        buffer.save(run.dir / "replay")


def task_generation_examples(run: Run, tok: Any) -> list[StepSample]:
    """Teach the experience model the task-generator format on real variations: seed train task -> another
    train task of its family (`env.task_family`: WebShop's product type, TextWorld's kind of quest), drawn by
    `curriculum.variation_pairs`."""
    n = run.cfg.curriculum.train_examples
    if n <= 0:
        return []
    pairs = variation_pairs(run.env.tasks("train"), run.env.task_family, n, random.Random(run.cfg.seed))
    if not pairs:
        log.warning("experience: no task-generation examples: every task family (env.task_family) of the train "
                    "split holds one instruction, so no train task is a variation of another")
    mode = run.cfg.curriculum.family
    out = []
    for a, b in pairs:
        fam = run.env.task_family(a)
        p = tok(task_generation_prompt(a.instruction, fam, mode), add_special_tokens=False)["input_ids"]
        t = tok(task_generation_target(b.instruction, fam, mode), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        out.append(StepSample(p, t))
    return out


def ending_training(run: Run, model: Any, tok: Any, trajs: list, fmt: ExperienceFormat, buffer: Any,
                    regular: Any) -> dict[str, float]:
    """`experience.ending_steps` steps on class-balanced episode-ending steps mixed with the stage's own samples,
    after its main training (`experience/endings.py`; redone whole after a kill, from the trained weights)
    -> experience/ending_*."""
    import time

    from dreamgym_pl.experience.endings import ending_phase
    from dreamgym_pl.precision import loop_precision

    e = run.cfg.experience
    t0 = time.time()
    res = ending_phase(model, tok, trajs, fmt, buffer, regular, e.ending_steps, e.ending_lr, e.batch_size,
                       run.cfg.seed + 5, e.grad_clip, e.warmup_steps, run.cfg.micro_batches,
                       e.precision if e.precision is not None else loop_precision(run.cfg, model))
    return {**res, "experience/ending_seconds": time.time() - t0} if res else {}


def experience_model_cfg(cfg: Any) -> dict[str, Any]:
    """The experience model's model config (`experience.model`): the policy's `model` group (policy), a
    conf/model/<name>.yaml file (`model_file`), or conf/model/hf.yaml's settings with LoRA off over a local folder
    / .gguf file; `experience.lora` (when not null) switches its LoRA on or off."""
    from omegaconf import OmegaConf

    name = str(cfg.experience.model)
    if name == "policy":
        mcfg = OmegaConf.to_container(cfg.model, resolve=True)
    elif is_model_file(name):
        mcfg = model_file(name)
    else:
        mcfg = model_file("hf")
        mcfg["name_or_path"] = name
        mcfg["lora"]["enabled"] = False
    if cfg.experience.lora is not None:
        mcfg["lora"] = {**mcfg["lora"], "enabled": bool(cfg.experience.lora)}
    return mcfg


def experience_model(run: Run) -> tuple[Any, Any]:
    """The untrained experience model (`experience_model_cfg`): a fresh tiny Llama sharing the run's word tokenizer
    (of its model config's size), or a pretrained model (its own tokenizer)."""
    from dreamgym_pl.models import build_tiny_llama, load_pretrained

    m = experience_model_cfg(run.cfg)
    if m["name_or_path"] == "tiny":
        _, tok = run.load_policy()
        return build_tiny_llama(tok, m["hidden_size"], m["num_layers"], m["num_heads"],
                                m["intermediate_size"], m["max_positions"], run.cfg.seed + 1), tok
    return load_pretrained(m["name_or_path"], m["dtype"], m["trust_remote_code"], lora=m["lora"])


def save_experience(run: Run, model: Any, tok: Any, stage: str) -> str:
    """The experience model -> checkpoints/<stage> (an adapter, or merged weights with its `merge_lora`)."""
    return run.save_policy(model, tok, stage, merge_lora=bool(experience_model_cfg(run.cfg)["merge_lora"]))


def sampled_policy(run: Run) -> Any:
    """The current policy as an actor in the real env, sampled as in RL (`algo.temperature`, `algo.top_p`)."""
    from dreamgym_pl.rollout.actor import policy_actor
    from dreamgym_pl.stages.policy import algorithm

    policy, tok = run.load_policy()
    a = algorithm(run).cfg
    return policy_actor(run.engine_for("policy", policy, tok), run.prompt_cfg, run.env, a.temperature,
                        a.max_new_tokens, a.top_p)


def unseen_train_tasks(run: Run) -> list:
    """Train tasks of which the offline data hold no transition: the experience model never trained on them
    (nor retrieves them), so fidelity measured there is not memorised."""
    seen = {t.task.task_id for t in run.offline_trajectories()}
    unseen = [t for t in run.env.tasks("train") if t.task_id not in seen]
    return unseen or run.env.tasks("train")


def onpolicy_fidelity(run: Run, model: Any, tok: Any, buffer: Any, fmt: ExperienceFormat,
                      outcome: Any = None) -> dict[str, float]:
    """Open-loop fidelity on the current policy's own behaviour (after sft: the SFT policy): its sampled real
    episodes on `experience.onpolicy_episodes` train tasks replayed through the experience model (endings judged
    by `outcome` when given and ruled out by the env's ending rules with `experience.ending_rules`, as in the
    synthetic env) -> experience/onpolicy_*, and the outcome model's verdicts
    on their endings -> experience/onpolicy_outcome_*. The real transitions it takes are counted
    (experience/real_transitions)."""
    from dreamgym_pl.experience.fidelity import open_loop
    from dreamgym_pl.experience.module import demos_for
    from dreamgym_pl.rollout.collector import run_episodes

    n = run.cfg.experience.onpolicy_episodes
    if n <= 0 or not run.state.get("policy"):
        return {}
    tasks = unseen_train_tasks(run)
    actor = sampled_policy(run)
    tasks = random.Random(run.cfg.seed).sample(tasks, min(n, len(tasks)))
    real = run_episodes(run.env, tasks, actor, batch_size=run.cfg.rollout.batch_size, source="policy")
    res = open_loop(run.engine_for("experience", model, tok), real, lambda t: demos_for(buffer, t, fmt), fmt,
                    run.cfg.experience.max_new_tokens, outcome=outcome,
                    ending_check=run.env.ending_check if run.cfg.experience.ending_rules else None)
    if outcome is not None:
        res.update(outcome_report(outcome, real, "open_loop/outcome"))  # -> experience/onpolicy_outcome_* below
    used = sum(len(t.transitions) for t in real)
    # an undefined score (terminal F1 without a success on either side) is left out of metrics.json
    return {"experience/real_transitions": used, "experience/real_resets": len(real),
            **{f"experience/onpolicy_{k.split('/', 1)[1]}": v for k, v in res.items() if math.isfinite(v)}}


def run_stage(run: Run) -> None:
    from dreamgym_pl.experience.judge import judge_steps
    from dreamgym_pl.experience.module import (ExperienceModule, bounded_trajectories, experience_loaders,
                                               split_by_task)

    e = run.cfg.experience
    trajs = run.offline_trajectories()
    annotate(trajs, run.env.explain)
    # held-out tasks are split off first: they are never trained on nor retrieved while the judge scores them
    trajs, held_out = split_by_task(trajs, e.val_fraction, run.cfg.seed)
    buffer = load_replay(run, fresh=True)  # the stage (re)builds it: nothing of an earlier run in this folder stays
    buffer.add([t for tr in trajs for t in tr.transitions], source="offline")
    # the scripted agents' data are bounded (whole trajectories, every agent in proportion)
    train_trajs, trajs = trajs, bounded_trajectories(trajs, e.max_transitions, run.cfg.seed)
    model, tok = experience_model(run)
    fmt = experience_format(run)
    gen_examples = task_generation_examples(run, tok)
    train_dl, val_dl = experience_loaders(trajs, held_out, tok, fmt, buffer, e.batch_size, run.cfg.seed,
                                          extra=gen_examples, terminal_repeat=e.terminal_repeat)
    gen_ids = {id(g) for g in gen_examples}  # task-generation examples are not transitions
    lengths = target_length_report([int(s.scalars.get("target_tokens", len(s.response_ids)))  # before the cut
                                    for s in {id(x): x for x in train_dl.dataset}.values() if id(s) not in gen_ids],
                                   e.max_new_tokens)
    if lengths["over_share"] > 0.01:
        log.warning("experience: %.0f%% of training targets are longer than experience.max_new_tokens=%d (longest %d "
                    "tokens, p95 %d): their generations are cut before <reward>/<done> and count as invalid; "
                    "raise experience.max_new_tokens", 100 * lengths["over_share"], e.max_new_tokens,
                    lengths["max_len"], lengths["p95_len"])
    module = ExperienceModule(model, tok, lr=e.lr, warmup_steps=e.warmup_steps, total_steps=e.max_steps,
                              micro_batches=run.cfg.micro_batches)
    by_steps = e.max_steps > 0
    own = {"precision": e.precision} if e.precision is not None else {}  # else trainer.precision
    fit(run, "experience", module, train_dl, val_dl, max_steps=e.max_steps, epochs=e.epochs, gradient_clip_val=e.grad_clip,
        val_check_interval=min(e.val_every, e.max_steps) if by_steps else None,
        check_val_every_n_epoch=None if by_steps else 1, **own)
    seed_stage(run.cfg.seed, "experience/after-training")  # what follows draws the same after a resumed training
    ending_res = ending_training(run, module.model, tok, trajs, fmt, buffer, train_dl.dataset)
    rel = save_experience(run, module.model, tok, "experience")
    outcome, outcome_res = train_outcome(run, train_trajs, held_out)  # every training-split ending, unbounded
    seed_stage(run.cfg.seed, "experience/after-outcome")  # trained or loaded after a kill: the same draws follow
    # whole held-out trajectories in a seeded random order: in collection order the judged steps were the oracle's
    judged = bounded_trajectories(held_out, e.judge_steps, run.cfg.seed) if e.judge_steps > 0 else []
    res = judge_steps(run.engine_for("experience", module.model, tok), judged, buffer, fmt, None,
                      max_new_tokens=e.max_new_tokens)
    res.update(onpolicy_fidelity(run, module.model, tok, buffer, fmt, outcome))
    buffer.add([t for tr in held_out for t in tr.transitions], source="offline")  # judged: now real data for RL
    save_replay(run, buffer)
    run.record({**res, **ending_res, **outcome_res, "experience/train_samples": len(train_dl.dataset), "experience/replay_size": len(buffer),
                "experience/task_generation_examples": len(gen_examples),
                "experience/targets_over_max_new_tokens": lengths["over_share"],
                "experience/target_max_tokens": lengths["max_len"]})
    log.info("experience: %s", {k: round(v, 3) for k, v in res.items()})
    run.state["experience"] = rel
    run.complete("experience")
