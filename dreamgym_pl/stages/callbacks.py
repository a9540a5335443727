"""Lightning callbacks of the RL stages. Besides Lightning's own hooks they receive the RolloutDataModule's
two events: `on_rollout_iteration_start` (before an iteration's rollouts) and `on_rollouts_end` (after them,
before the iteration's updates; they may add to the iteration's `logs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import lightning as L

from dreamgym_pl import dist
from dreamgym_pl.run import atomic_write_json, read_json
from dreamgym_pl.stages.resume import continue_steps, restore_optimizer


class RLCheckpoint(L.Callback):
    """Restores the optimizer and lr schedule of a resumed stage, and saves a checkpoint through
    `save(module, datamodule)` every `every` iterations, once the iteration's last mini-batch is trained.

    Lightning fetches a batch ahead: when iteration N's last mini-batch is trained, the rollouts of N+1 are
    done and its first mini-batch is fetched. So a checkpoint holds the weights after N and the data module
    after the rollouts of N+1 with N+1's mini-batches, none of them trained yet (see RolloutDataModule).

    Transitions consumed after the checkpoint a stage resumes from are consumed again (identically); how many
    is measured: `progress` (a file) holds the transitions consumed so far, rewritten after every iteration's
    rollouts, and `redone` adds up, over the stage's resumes, those a kill threw away (the iteration in flight
    at the kill is not in it)."""

    def __init__(self, save: Callable[[Any, Any], None], every: int, resume_state: dict | None = None,
                 progress: Path | None = None, resume: bool = False):
        self.save, self.every, self.resume_state, self.progress = save, every, resume_state, progress
        self.redone = 0
        if resume and progress is not None and progress.exists():
            prev = read_json(progress, f"delete {progress} (a count of redone transitions is lost)",
                             keys=("consumed", "redone"))
            start = int(resume_state["consumed"]) if resume_state else 0
            self.redone = int(prev["redone"]) + max(0, int(prev["consumed"]) - start)

    def on_rollouts_end(self, trainer: L.Trainer, pl_module: L.LightningModule, dm: Any, trajs: list,
                        logs: dict) -> None:
        if self.progress is not None and dist.is_main():
            atomic_write_json(self.progress, {"consumed": dm.consumed, "redone": self.redone})

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        restore_optimizer(trainer, self.resume_state)
        continue_steps(trainer, int((self.resume_state or {}).get("global_step", 0)))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        dm = trainer.datamodule
        iteration, last = dm.marks.pop(0)
        # (the generator done, no batch of a later iteration pending: the stage is ending and saves itself)
        if last and self.every and (iteration + 1) % self.every == 0 and dm.pending is not None \
                and dm.pending_iteration > iteration:
            self.save(pl_module, dm)


class RolloutSamples(L.Callback):
    """A few sampled trajectories as TensorBoard text (`rollout/samples`) every `every` iterations."""

    def __init__(self, every: int = 5, count: int = 3):
        self.every, self.count = every, count

    def on_rollouts_end(self, trainer: L.Trainer, pl_module: L.LightningModule, dm: Any, trajs: list, logs: dict) -> None:
        it = dm.iteration
        if self.every <= 0 or it % self.every or pl_module.logger is None:
            return
        lines = []
        for t in trajs[: self.count]:
            acts = " -> ".join(s.action for s in t.transitions)
            lines.append(f"**{t.task.instruction}**  \n{acts}  \nreward {t.final_reward:.2f}")
        pl_module.logger.experiment.add_text("rollout/samples", "\n\n".join(lines), it)


class TestCurve(L.Callback):
    """Every `every` iterations, the current policy (before the iteration's update) evaluated greedily on the
    first `goals` tasks of `split` (val: what budgets and settings are chosen on; test: a report only):
    `<split>/success_rate` and `<split>/mean_score` join the iteration's logs (the curve of success against
    transitions in history/ and plots/)."""

    def __init__(self, evaluate: Callable[..., dict[str, float]], every: int, goals: int, split: str = "val"):
        self.evaluate, self.every, self.goals, self.split = evaluate, every, goals, split

    def on_rollouts_end(self, trainer: L.Trainer, pl_module: L.LightningModule, dm: Any, trajs: list, logs: dict) -> None:
        if self.every <= 0 or dm.iteration % self.every:
            return
        was_training = pl_module.model.training
        res = self.evaluate(pl_module.model, pl_module.tokenizer, num_goals=self.goals, split=self.split)
        pl_module.model.train(was_training)
        logs.update({f"{self.split}/success_rate": res["success_rate"], f"{self.split}/mean_score": res["mean_score"]})


def generation_examples_text(examples: list[tuple[str, str, str]]) -> str:
    """TensorBoard markdown of task-generation examples (seed instruction, generated text, verdict): one
    paragraph each, the texts as code so that markdown leaves them as generated."""
    def code(s: str) -> str:
        return "`" + s.replace("`", "'") + "`"

    return "\n\n".join(f"**{verdict}**: {code(seed)} -> {code(gen)}" for seed, gen, verdict in examples)


class CurriculumLogs(L.Callback):
    """Synthetic RL: merges data-parallel synthetic enrichment, adds the curriculum's logs to the iteration's
    and shows newly generated tasks (`curriculum/generated_tasks`) and examples of generations, seed ->
    generated with its verdict (`curriculum/generation_examples`), as TensorBoard text."""

    def __init__(self, curriculum: Any, synthetic_env: Any):
        self.curriculum, self.senv = curriculum, synthetic_env

    def on_rollouts_end(self, trainer: L.Trainer, pl_module: L.LightningModule, dm: Any, trajs: list, logs: dict) -> None:
        if self.senv.defer_enrich:
            self.senv.sync_enrichment()
        cur = self.curriculum
        logs.update(cur.last_logs)
        if cur.last_new and pl_module.logger is not None:
            pl_module.logger.experiment.add_text("curriculum/generated_tasks",
                                                 "\n\n".join(f"{t.task_id} (from {t.parent_id}): {t.instruction}"
                                                             for t in cur.last_new[:8]), dm.iteration)
        if cur.last_examples and pl_module.logger is not None:
            pl_module.logger.experiment.add_text("curriculum/generation_examples",
                                                 generation_examples_text(cur.last_examples), dm.iteration)
