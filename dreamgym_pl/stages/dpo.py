"""dpo: the offline baseline, DPO on (successful, failed) trajectories of the same task -> checkpoints/dpo."""

from __future__ import annotations

from dreamgym_pl.policy.algos.dpo import DPO, dpo_loader, dpo_pairs
from dreamgym_pl.policy.module import PolicyModule
from dreamgym_pl.precision import loop_autocast
from dreamgym_pl.stages.context import Run
from dreamgym_pl.stages.policy import finish_policy_stage
from dreamgym_pl.stages.resume import fit


def run_stage(run: Run) -> None:
    c = run.cfg.dpo
    model, tok = run.load_policy()
    pairs = dpo_pairs(run.offline_trajectories(), c.max_pairs, run.cfg.seed)
    if not pairs:
        raise RuntimeError("dpo: no (successful, failed) pairs of the same task in the offline data")
    module = PolicyModule(model, tok, DPO(c.beta), lr=c.lr, micro_batches=run.cfg.micro_batches)
    with loop_autocast(run.cfg, model):  # the reference's log-probs as the fit's
        loader = dpo_loader(pairs, module, run.prompt_cfg, c.batch_size, run.cfg.seed)
    fit(run, "dpo", module, loader, epochs=c.epochs)  # (the reference stays the starting policy on resume)
    finish_policy_stage(run, "dpo", module, {"dpo/pairs": len(pairs)})
