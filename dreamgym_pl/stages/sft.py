"""sft: behaviour cloning of the policy on offline trajectories (successful ones, or those scoring at least
sft.min_score) -> checkpoints/sft."""

from __future__ import annotations

from dreamgym_pl.core import Trajectory
from dreamgym_pl.policy.algos.sft import SFT, sft_loader
from dreamgym_pl.policy.module import PolicyModule
from dreamgym_pl.rollout.prompts import ACTION_CUE
from dreamgym_pl.stages.context import Run
from dreamgym_pl.stages.copy_start import copy_warm_start, mixed_copy_examples
from dreamgym_pl.stages.policy import finish_policy_stage
from dreamgym_pl.stages.resume import fit


def clone_set(trajs: list[Trajectory], source: str, min_score: float | None, n: int) -> list[Trajectory]:
    """The first `n` (0: all) of `trajs` from `source` (or all) that are successful (`min_score` None) or end with a
    reward of at least `min_score`."""
    keep = (lambda t: t.success) if min_score is None else (lambda t: bool(t.transitions) and t.final_reward >= min_score)
    out = [t for t in trajs if keep(t) and (source == "all" or t.source == source)]
    return out[:n] if n else out


def sft_trajectories(run: Run) -> list[Trajectory]:
    c = run.cfg.sft
    return clone_set(run.offline_trajectories(), c.source, c.min_score, c.num_trajectories)


def run_stage(run: Run) -> None:
    c = run.cfg.sft
    model, tok = run.load_policy()
    copy_res, copies = {}, []
    # a pretrained model copies already (sft.copy_*: model=tiny only); the offline data are read again only when on
    if run.cfg.model.name_or_path == "tiny" and (c.copy_steps > 0 or c.copy_examples > 0):
        offline = run.offline_trajectories()
        copy_res = copy_warm_start(run, "sft", model, tok, offline, c.copy_steps, c.batch_size, c.lr,
                                   c.copy_length, ACTION_CUE, run.cfg.seed + 5, c.warmup_steps, c.grad_clip)
        copies = mixed_copy_examples(tok, offline, c.copy_examples, c.copy_length, ACTION_CUE, run.cfg.seed + 6)
    trajs = sft_trajectories(run)
    loader = sft_loader(trajs, tok, run.prompt_cfg, c.batch_size, run.cfg.seed, extra=copies)
    module = PolicyModule(model, tok, SFT(), lr=c.lr, warmup_steps=c.warmup_steps, total_steps=c.max_steps,
                          micro_batches=run.cfg.micro_batches)
    fit(run, "sft", module, loader, max_steps=c.max_steps, epochs=c.epochs, gradient_clip_val=c.grad_clip)
    finish_policy_stage(run, "sft", module, {**copy_res, "sft/trajectories": len(trajs),
                                           "sft/samples": len(loader.dataset) - len(copies),
                                           "sft/copy_examples": len(copies)})
