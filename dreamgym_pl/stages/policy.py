"""What the policy-training stages share: finishing a stage (save, evaluate, record), the RL stages' module,
their checkpoints (one versioned folder per checkpoint, published by one pointer swap), per-iteration
history and plots, and the data-parallel rank report."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Callable

import torch
from omegaconf import OmegaConf

from dreamgym_pl import dist
from dreamgym_pl.policy.algos import RLAlgorithm, rl_algorithm
from dreamgym_pl.run import VersionedDir, atomic_write_json, read_json
from dreamgym_pl.stages.context import Run

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


def val_metrics(run: Run, model: Any, tokenizer: Any, prefix: str) -> dict[str, float]:
    """`<prefix>/val_success_rate`, `val_mean_score`, `val_num_goals`: the greedy policy on the first
    `eval.val_goals` val tasks (the split sweeps and defaults are chosen on); {} when eval.val_goals is 0."""
    n = int(run.cfg.eval.get("val_goals", 0) or 0)
    if n <= 0:
        return {}
    res = run.evaluate(model, tokenizer, progress=f"val after {prefix}", num_goals=n, split="val")
    log.info("%s: val success %.3f, mean score %.3f", prefix, res["success_rate"], res["mean_score"])
    return {f"{prefix}/val_success_rate": res["success_rate"], f"{prefix}/val_mean_score": res["mean_score"],
            f"{prefix}/val_num_goals": min(n, len(run.env.tasks("val")))}


def algorithm(run: Run) -> RLAlgorithm:
    return rl_algorithm(OmegaConf.to_container(run.cfg.algo, resolve=True))


# ----- RL checkpoints -------------------------------------------------------------------------------
def checkpoints(run: Run, stage: str) -> VersionedDir:
    return VersionedDir(run.dir / "checkpoints" / stage / "resume", prefix="it")


def save_rl_checkpoint(run: Run, stage: str, module: Any, state: dict, extra: Callable[[], None] | None = None) -> None:
    """Weights, optimizer, value head and the data module's counters in a new version folder, then `extra()`
    (replay buffer, curriculum), then the pointer swap that publishes the version."""
    from dreamgym_pl.models import save_model

    if not dist.is_main():
        return
    store = checkpoints(run, stage)
    vdir = store.new(int(state["iteration"]))
    save_model(module.model, module.tokenizer, vdir)
    torch.save(module.trainer.optimizers[0].state_dict(), vdir / "optimizer.pt")
    if module.value_head is not None:
        torch.save(module.value_head.state_dict(), vdir / "value_head.pt")
    atomic_write_json(vdir / "stream.json", state)
    if extra:
        extra()
    store.commit(vdir)


def load_rl_checkpoint(run: Run, stage: str) -> tuple[Any, Any, dict | None]:
    """(model, tokenizer, saved state) from the stage's last checkpoint when resuming, else the current policy."""
    from dreamgym_pl.models import load_pretrained

    vdir = checkpoints(run, stage).current() if run.cfg.resume else None
    if vdir is not None:
        model, tok = load_pretrained(vdir, run.cfg.model.get("dtype", "float32"))
        state = read_json(vdir / "stream.json")
        state["optimizer"] = torch.load(vdir / "optimizer.pt", weights_only=True)
        vh = vdir / "value_head.pt"
        state["value_head"] = torch.load(vh, weights_only=True) if vh.exists() else None
        log.info("%s: resuming from iteration %d (%d transitions consumed)", stage, state["iteration"], state["consumed"])
        return model, tok, state
    model, tok = run.load_policy()
    return model, tok, None


def rl_module(run: Run, model: Any, tok: Any, algo: RLAlgorithm, state: dict | None):
    from dreamgym_pl.policy.module import PolicyModule

    # on resume the KL reference stays the stage's starting policy, not the checkpoint
    ref = run.load_policy()[0] if state and algo.needs_reference else None
    # warm-up only from a fresh start: a resumed stage's optimizer state is already past it
    module = PolicyModule(model, tok, algo, lr=algo.cfg.lr, ref_model=ref,
                          warmup_steps=0 if state else algo.cfg.warmup_steps)
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
    tested = [(xi, h["test/success_rate"]) for xi, h in zip(x, history) if "test/success_rate" in h]
    if tested:
        axes[0].plot(*zip(*tested), marker="s", color="tab:green", label="test (greedy)")
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
