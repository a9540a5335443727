"""What the policy-training stages share: finishing a stage (save, evaluate, record), the RL stages' module,
their checkpoints (one versioned folder per checkpoint, published by one pointer swap), per-iteration
history and plots, and the data-parallel rank report."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Callable

import torch

from dreamgym_pl import dist
from dreamgym_pl.policy.algos import RLAlgorithm, rl_algorithm
from dreamgym_pl.core import Trajectory, from_dict, iter_jsonl, write_jsonl
from dreamgym_pl.policy.zero import read_optimizer, save_optimizer
from dreamgym_pl.run import VersionedDir, atomic_write_json, read_json, reading
from dreamgym_pl.stages.context import Run
from dreamgym_pl.stages.resume import logged_step

log = logging.getLogger("dreamgym_pl")


def finish_policy_stage(run: Run, stage: str, module: Any, extra: dict[str, float]) -> None:
    """Save the stage's policy, evaluate it on the val tasks (`<stage>/val_*`, what tuning reads) and the test
    tasks (`<stage>/test_*`, reported only), record both, mark the stage done."""
    rel = run.save_policy(module.model, module.tokenizer, stage)
    val = val_metrics(run, module.model, module.tokenizer, stage)
    res = run.evaluate(module.model, module.tokenizer, progress=f"eval after {stage}")
    run.record({**extra, **val, f"{stage}/test_success_rate": res["success_rate"],
                f"{stage}/test_mean_score": res["mean_score"], f"{stage}/test_invalid_action_rate": res["invalid_action_rate"]})
    log.info("%s: test success %.3f, mean score %.3f", stage, res["success_rate"], res["mean_score"])
    run.complete(stage, policy=rel)


def val_metrics(run: Run, model: Any, tokenizer: Any, prefix: str, outcomes: Path | None = None) -> dict[str, float]:
    """`<prefix>/val_success_rate`, `val_mean_score`, `val_num_goals`: the greedy policy on the first
    `eval.val_goals` val tasks (the split sweeps and defaults are chosen on); {} when eval.val_goals is 0.
    `outcomes`: each val goal's outcome also goes to this JSONL file (paired comparisons on val)."""
    n = int(run.cfg.eval.val_goals)
    if n <= 0:
        return {}
    res = run.evaluate(model, tokenizer, progress=f"val after {prefix}", num_goals=n, split="val",
                       outcomes=outcomes)
    log.info("%s: val success %.3f, mean score %.3f", prefix, res["success_rate"], res["mean_score"])
    return {f"{prefix}/val_success_rate": res["success_rate"], f"{prefix}/val_mean_score": res["mean_score"],
            f"{prefix}/val_num_goals": min(n, len(run.env.tasks("val")))}


def algorithm(run: Run) -> RLAlgorithm:
    """The RL algorithm of `algo` (every RL stage's)."""
    from omegaconf import OmegaConf

    return rl_algorithm(OmegaConf.to_container(run.cfg.algo, resolve=True))


# ----- RL checkpoints -------------------------------------------------------------------------------
def checkpoints(run: Run, stage: str) -> VersionedDir:
    root = run.dir / "checkpoints" / stage / "resume"
    return VersionedDir(root, prefix="it", fix=f"delete {root} to restart {stage} from its start (the stages before "
                                                  f"it stay done), or rerun with resume=false")


def save_rl_checkpoint(run: Run, stage: str, module: Any, dm: Any, extra: Callable[[Path], None] | None = None) -> None:
    """One commit point: weights, optimizer, lr schedule and value head (none of them for `module=None`: the
    stage's start), the data module's counters, its untrained mini-batches and last trajectories, and
    `extra(version folder)` (replay buffer, curriculum) all go into one new version folder, which one pointer
    swap publishes. A kill before the swap leaves the previous version whole."""
    from dreamgym_pl.models import save_model

    store = checkpoints(run, stage)
    vdir = store.root / f"it-{int(dm.iteration):06d}"
    if dist.is_main():
        store.new(int(dm.iteration))
    dist.barrier()
    r = dist.rank()  # every rank saves its own untrained mini-batches and trajectories
    if dm.pending is not None and dm.pending_iteration == dm.iteration - 1:
        torch.save(dm.pending, vdir / f"pending_rank{r}.pt")
    if dm.last is not None:
        write_jsonl(vdir / f"last_rank{r}.jsonl", dm.last)
    if module is not None:  # ZeRO: every rank its optimizer partition; else rank 0 the optimizer (policy/zero.py)
        save_optimizer(module.trainer.optimizers[0], vdir, r, dist.is_main())
    dist.barrier()
    if not dist.is_main():
        return
    state = dm.state_dict()
    if module is not None:
        save_model(module.model, module.tokenizer, vdir / "model")
        state["global_step"] = logged_step(module.trainer)  # a resumed stage's TensorBoard steps go on from it
        if module.trainer.lr_scheduler_configs:
            torch.save(module.trainer.lr_scheduler_configs[0].scheduler.state_dict(), vdir / "scheduler.pt")
        if module.value_head is not None:
            torch.save(module.value_head.state_dict(), vdir / "value_head.pt")
        state["pending_logs"] = dict(module.pending_logs)
    atomic_write_json(vdir / "stream.json", state)
    if extra:
        extra(vdir)
    store.commit(vdir)


def load_rl_checkpoint(run: Run, stage: str) -> tuple[Any, Any, dict | None]:
    """(model, tokenizer, saved state) from the stage's last checkpoint when resuming, else the current policy.
    Everything comes from one version folder; `state["dir"]` is it (the caller's extras live there too)."""
    from dreamgym_pl.models import load_pretrained

    store = checkpoints(run, stage)
    vdir = store.current() if run.cfg.resume else None
    if vdir is None:
        model, tok = run.load_policy()
        return model, tok, None
    fix = store.fix
    state = read_json(vdir / "stream.json", fix, keys=("iteration", "consumed"))
    state["dir"] = vdir

    def load(name: str) -> Any:
        with reading(vdir / name, fix):
            return torch.load(vdir / name, weights_only=True) if (vdir / name).exists() else None

    if (vdir / "model").is_dir():
        with reading(vdir / "model", fix):
            m = run.cfg.model
            model, tok = load_pretrained(vdir / "model", m.dtype, m.trust_remote_code, lora=m.lora)
    else:  # the stage's start: no update made yet
        model, tok = run.load_policy()
    for key in ("scheduler", "value_head"):
        state[key] = load(f"{key}.pt")
    with reading(vdir / "optimizer.pt", fix):  # (or ZeRO's optimizer_rank<r>.pt, one per rank)
        state["optimizer"] = read_optimizer(vdir)
    state["pending"] = load(f"pending_rank{dist.rank()}.pt")
    last = vdir / f"last_rank{dist.rank()}.jsonl"
    with reading(last, fix):
        state["last"] = [from_dict(Trajectory, d) for d in iter_jsonl(last)] if last.exists() else None
    log.info("%s: resuming from iteration %d (%d transitions consumed)", stage, state["iteration"], state["consumed"])
    return model, tok, state


def rl_module(run: Run, model: Any, tok: Any, algo: RLAlgorithm, state: dict | None):
    from dreamgym_pl.policy.module import PolicyModule

    # on resume the KL reference stays the stage's starting policy, not the checkpoint
    ref = run.load_policy()[0] if state and algo.needs_reference else None
    # a resumed stage gets the same schedule; RLCheckpoint restores its position (and the optimizer's state)
    module = PolicyModule(model, tok, algo, lr=algo.cfg.lr, ref_model=ref, warmup_steps=algo.cfg.warmup_steps,
                          micro_batches=run.cfg.micro_batches)
    if state and state.get("value_head") is not None and module.value_head is not None:
        module.value_head.load_state_dict(state["value_head"])
    return module


# ----- reports --------------------------------------------------------------------------------------
def plot_history(run: Run, stage: str, history: list[dict[str, float]]) -> None:
    """history/<stage>.json (one dict of logs per iteration) and plots/<stage>_rollouts.png."""
    if not history or not dist.is_main():
        return
    (run.dir / "history").mkdir(exist_ok=True)
    (run.dir / "history" / f"{stage}.json").write_text(json.dumps(history, indent=0))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    x = [h.get("budget/real_transitions", h.get("budget/synthetic_transitions", i)) for i, h in enumerate(history)]
    axes[0].plot(x, [h["rollout/success_rate"] for h in history], marker="o", label="rollouts")
    split = run.cfg.eval.curve_split
    tested = [(xi, h[f"{split}/success_rate"]) for xi, h in zip(x, history) if f"{split}/success_rate" in h]
    if tested:
        axes[0].plot(*zip(*tested), marker="s", color="tab:green", label=f"{split} (greedy)")
        axes[0].legend(fontsize=7)
    axes[0].set(xlabel="transitions consumed", ylabel="rollout success rate", title=f"{stage}: success")
    axes[1].plot(x, [h["rollout/mean_score"] for h in history], marker="o", color="tab:orange")
    axes[1].set(xlabel="transitions consumed", ylabel="rollout mean score", title=f"{stage}: score")
    fig.tight_layout()
    (run.dir / "plots").mkdir(exist_ok=True)
    fig.savefig(run.dir / "plots" / f"{stage}_rollouts.png", dpi=100)
    plt.close(fig)


def rank_report(run: Run, stage: str, dm: Any, module: Any, **extra: Any) -> None:
    """ranks/<stage>_rank<r>.json: what this rank rolled out and a digest of its weights after the stage
    (data-parallel runs: the digests must agree and the task ids of an iteration must not repeat)."""
    h = hashlib.sha1()
    for name, p in sorted(module.model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().float().numpy().tobytes())
    d = run.dir / "ranks"
    d.mkdir(exist_ok=True)
    atomic_write_json(d / f"{stage}_rank{dist.rank()}.json",
                      {"rank": dist.rank(), "world": dist.world(), "tasks": dm.rank_log,
                       "local_transitions": dm.local_consumed, "transitions": dm.consumed,
                       "weights_sha1": h.hexdigest(), **extra})
