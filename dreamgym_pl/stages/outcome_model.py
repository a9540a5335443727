"""The outcome model's place in the pipeline (experience/outcome.py): trained by the experience stage on the offline
data's episode endings -> checkpoints/outcome (run.state["outcome"]), loaded by the synthetic env's builders."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Sequence

from dreamgym_pl import dist
from dreamgym_pl.run import reading
from dreamgym_pl.precision import loop_precision
from dreamgym_pl.stages.context import Run

log = logging.getLogger("dreamgym_pl")
OUTCOME_DIR = "checkpoints/outcome"


def enabled(run: Run) -> bool:
    return run.cfg.experience.outcome_model != "none"


def report(model: Any, trajs: Sequence, prefix: str) -> dict[str, float]:
    """The outcome model's verdicts on the endings of `trajs` against their real outcomes -> `<prefix>_<key>`
    (accuracy, precision, recall, f1, judged_success, real_success, n; an undefined F1 is left out)."""
    import math

    from dreamgym_pl.experience.outcome import classification_report, outcome_examples, verdict

    ex = outcome_examples(trajs)
    if not ex:
        return {}
    said = [verdict(p, s)[0] for p, s in model([(e.instruction, e.state, e.action) for e in ex])]
    res = classification_report(said, [e.success for e in ex])
    return {f"{prefix}_{k}": v for k, v in res.items() if math.isfinite(v)}


def played_counts(played: Sequence) -> dict[str, float]:
    """The real steps and resets of the outcome model's own episodes (in budget/real_transitions, _resets)."""
    return {"experience/outcome_real_transitions": float(sum(len(t.transitions) for t in played)),
            "experience/outcome_real_resets": float(len(played))}


def outcome_episodes(run: Run, trajs: Sequence) -> list:
    """`experience.outcome_agents` (scripted agent -> episodes): episodes played for the outcome model only, on the
    tasks of `trajs` (the experience stage's training split, so held-out tasks stay unseen) -> offline/
    outcome_transitions.jsonl (read back on resume), counted as experience/outcome_real_transitions and _resets."""
    from dreamgym_pl.core import Transition, group_trajectories, read_jsonl, write_jsonl
    from dreamgym_pl.stages.collect import play_agents

    agents = {k: int(v) for k, v in run.cfg.experience.outcome_agents.items() if int(v) > 0}
    path = run.dir / "offline" / "outcome_transitions.jsonl"
    if not agents:
        return []
    if run.cfg.resume and path.exists():
        with reading(path, f"delete {path} (the experience stage plays it again), or rerun with resume=false"):
            out = group_trajectories(read_jsonl(path, Transition))
    else:
        by_id = {t.task.task_id: t.task for t in trajs}
        tasks = [by_id[k] for k in sorted(by_id)]
        out = [t for _, played in play_agents(run, agents, tasks, run.cfg.seed + 101, "outcome-", "outcome")
               for t in played]
        if dist.is_main():
            write_jsonl(path, [st for t in out for st in t.transitions])
        dist.barrier()
    run.record(played_counts(out))
    return out


def train_outcome(run: Run, trajs: Sequence, held_out: Sequence) -> tuple[Any, dict[str, float]]:
    """(the outcome model, its metrics): fine-tuned on the endings of `trajs` and of `outcome_episodes` on their
    tasks (experience/outcome_* : steps,
    examples, successes, seconds, the held-out endings' report) and saved; with `resume` and a saved one, that
    one. (None, {}) when `experience.outcome_model` is none."""
    from dreamgym_pl.experience.outcome import OutcomeModel, outcome_examples, train_outcome_model

    if not enabled(run):
        return None, {}
    e = run.cfg.experience
    path = run.dir / OUTCOME_DIR
    if run.cfg.resume and (path / "outcome.json").exists():  # a kill after it was saved: its metrics come with it
        run.state["outcome"] = OUTCOME_DIR
        with reading(path / "outcome.json", "rerun with resume=false"):
            saved = json.loads((path / "outcome.json").read_text())["metrics"]
        return load_outcome_model(run, path), saved
    played = outcome_episodes(run, trajs)
    ex = outcome_examples(list(trajs) + played)
    if not ex:
        log.warning("experience: no episode endings in the offline data: the outcome model is not trained and "
                    "the experience model's own rewards are used")
        return None, {}
    model = OutcomeModel(max_length=e.outcome_max_length,
                         precision=loop_precision(run.cfg, "cpu"))  # it runs on the CPU
    t0 = time.time()
    from tqdm import tqdm

    bar = tqdm(total=e.outcome_steps, desc="outcome model", disable=not dist.is_main(), leave=False)

    def progress(step: int, loss: float) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")

    losses = train_outcome_model(model, ex, e.outcome_steps, e.outcome_batch_size, e.outcome_lr, run.cfg.seed + 6,
                                 progress=progress, micro_batches=run.cfg.micro_batches)
    bar.close()
    res = {"experience/outcome_steps": float(len(losses)), "experience/outcome_examples": float(len(ex)),
           "experience/outcome_example_successes": float(sum(x.success for x in ex)),
           "experience/outcome_seconds": time.time() - t0}
    if played:  # saved with the model: a run that loads a copied one still counts the real steps it was trained on
        res.update(played_counts(played))
    if losses:
        tail = losses[-min(20, len(losses)):]
        res["experience/outcome_final_loss"] = sum(tail) / len(tail)
    res.update(report(model, held_out, "experience/outcome_heldout"))
    if dist.is_main():  # written whole beside, then moved into place: a kill leaves no half-saved model
        import shutil

        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save(tmp, {"examples": len(ex), "steps": len(losses), "metrics": res})
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
    dist.barrier()
    run.state["outcome"] = OUTCOME_DIR
    return model, res


def load_outcome_model(run: Run, path: Path | None = None) -> Any:
    from dreamgym_pl.experience.outcome import OutcomeModel

    path = path or run.dir / run.state.get("outcome", OUTCOME_DIR)
    fix = ("rerun the experience stage (resume=false, or drop experience and the stages after it from stages.json's "
           "completed list), or set experience.outcome_model=none")
    with reading(path / "outcome.json", fix):
        (path / "outcome.json").read_text()
        return OutcomeModel(path, max_length=run.cfg.experience.outcome_max_length,
                            precision=loop_precision(run.cfg, "cpu"))  # it runs on the CPU


def load_outcome(run: Run) -> Any:
    """The run's outcome model as an `Outcome` callable, or None when `experience.outcome_model` is none."""
    return load_outcome_model(run) if enabled(run) else None
