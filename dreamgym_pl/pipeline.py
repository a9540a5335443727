"""The pipeline: runs the configured stages in order, with artifacts and resume in the run directory.

Run directory contract (scripts, sweeps and people read these):
  stages.json    completed stages and the current policy checkpoint (resume)
  metrics.json   flat {"key": number}, rewritten atomically after every stage
  offline/       transitions.jsonl from `collect`
  checkpoints/   <stage>/ HF-format policy weights + tokenizer
  tb/            TensorBoard logs, one sub-directory per stage
  plots/         PNG curves
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import DictConfig, OmegaConf

from dreamgym_pl import config as config_checks
from dreamgym_pl.agents import make_agent
from dreamgym_pl import dist
from dreamgym_pl.core import Trajectory, group_trajectories, read_jsonl, Transition, write_jsonl
from dreamgym_pl.envs.base import make_vec_env
from dreamgym_pl.rollout.collector import episode_stats, run_episodes
from dreamgym_pl.rollout.prompts import PromptConfig

log = logging.getLogger("dreamgym_pl")

POLICY_STAGES = ("sft", "dpo", "rl", "synthetic_rl", "s2r")


def atomic_write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Run:
    """State of one run directory: config, env, metrics, completed stages, current policy."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path, callbacks: list | None = None):
        self.cfg = cfg
        self.dir = Path(run_dir)
        self.callbacks = list(callbacks or [])  # extra Lightning callbacks for every stage (e.g. sweep pruning)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics: dict[str, float] = {}
        self.state: dict[str, Any] = {"completed": [], "policy": None}
        if cfg.resume:
            if (self.dir / "stages.json").exists():
                self.state = json.loads((self.dir / "stages.json").read_text())
            if (self.dir / "metrics.json").exists():
                self.metrics = json.loads((self.dir / "metrics.json").read_text())
        env_kwargs = {k: v for k, v in OmegaConf.to_container(cfg.env, resolve=True).items() if k != "name"}
        self.env = make_vec_env(cfg.env.name, **env_kwargs)
        self.prompt_cfg = PromptConfig(**OmegaConf.to_container(cfg.prompt, resolve=True))
        self._model_cache: tuple[str, Any, Any] | None = None
        self._engines: dict[str, Any] = {}

    # ----- bookkeeping ---------------------------------------------------------------------------
    @property
    def offline_path(self) -> Path:
        return Path(self.cfg.offline_file) if self.cfg.get("offline_file") else self.dir / "offline" / "transitions.jsonl"

    def record(self, values: dict[str, float]) -> None:
        self.metrics.update({k: float(v) for k, v in values.items()})
        if dist.is_main():  # every rank keeps the metrics; rank 0 writes them
            atomic_write_json(self.dir / "metrics.json", self.metrics)

    def add_budget(self, key: str, n: float) -> None:
        self.record({f"budget/{key}": self.metrics.get(f"budget/{key}", 0.0) + float(n)})

    def complete(self, stage: str, policy: str | None = None) -> None:
        if stage not in self.state["completed"]:
            self.state["completed"].append(stage)
        if policy is not None:
            self.state["policy"] = policy
        if dist.is_main():
            atomic_write_json(self.dir / "stages.json", self.state)

    def offline_trajectories(self) -> list[Trajectory]:
        return group_trajectories(read_jsonl(self.offline_path, Transition))

    # ----- models --------------------------------------------------------------------------------
    def tokenizer_corpus(self) -> list[str]:
        """Text for the tiny tokenizer: instructions of all goals, product texts, and pages/actions seen by
        the scripted agents on train goals (offline data when present)."""
        texts: list[str] = [t.instruction for split in ("train", "test") for t in self.env.tasks(split)]
        engine = getattr(self.env, "engine", None)
        if engine is not None and hasattr(engine, "products"):
            from dreamgym_pl.envs.webshop.search import product_text

            texts += [product_text(p) for p in engine.products]
        if self.offline_path.exists():
            trajs = self.offline_trajectories()
        else:
            tasks = self.env.tasks("train")[:200]
            trajs = []
            for name in ("oracle", "random"):
                trajs += run_episodes(self.env, tasks, make_agent(name, self.cfg.seed, env=self.env), batch_size=64)
        from dreamgym_pl.experience.annotate import rule_based_reasoning
        from dreamgym_pl.curriculum import task_generation_prompt

        for t in trajs:
            for s in t.transitions:
                texts += [s.state.text, s.action, s.next_state.text, rule_based_reasoning(s)]
        # every word the prompts and targets use must be in the vocabulary (an <unk> is dropped on decode)
        texts += list(getattr(self.env, "corpus", lambda: [])())
        texts += ["click[back to search]", "click[next >]", "click[< prev]", "click[buy now]", "search[x]",
                  "<think> </think> <action> </action> task : did : seen : observation : admissible : action :",
                  "example : state : action : next : reward : done : predict : true false | 0.00 1.00 ...",
                  task_generation_prompt("x"), "invalid transition: the environment could not continue"]
        return texts

    def load_policy(self, path: str | None = None) -> tuple[Any, Any]:
        from dreamgym_pl.models import get_base_model, load_pretrained

        path = path or self.state.get("policy")
        if path:
            model, tok = load_pretrained(self.dir / path, self.cfg.model.get("dtype", "float32"))
            return model, tok
        mcfg = OmegaConf.to_container(self.cfg.model, resolve=True)
        corpus = self.tokenizer_corpus() if mcfg["name_or_path"] == "tiny" else None
        if dist.world() > 1:  # rank 0 builds and saves the base model, the others load it
            if dist.is_main():
                get_base_model(mcfg, self.dir, corpus, self.cfg.seed)
            dist.barrier()
        return get_base_model(mcfg, self.dir, corpus, self.cfg.seed)

    def save_policy(self, model: Any, tokenizer: Any, stage: str) -> str:
        from dreamgym_pl.models import save_model

        rel = f"checkpoints/{stage}"
        target = model.merge_and_unload() if hasattr(model, "merge_and_unload") and self.cfg.model.get("merge_lora", False) else model
        if dist.is_main():
            save_model(target, tokenizer, self.dir / rel)
        dist.barrier()
        return rel

    def trainer(self, stage: str, **overrides: Any):
        import lightning as L
        from lightning.pytorch.loggers import TensorBoardLogger

        tcfg = OmegaConf.to_container(self.cfg.trainer, resolve=True)
        tcfg.pop("_name", None)
        strategy = tcfg.pop("strategy", "auto")
        if isinstance(strategy, dict):
            from hydra.utils import instantiate

            strategy = instantiate(strategy)
        kwargs = dict(logger=TensorBoardLogger(str(self.dir / "tb"), name=stage, version=""),
                      enable_checkpointing=False, log_every_n_steps=1, strategy=strategy,
                      enable_model_summary=False, **tcfg)
        if self.callbacks:
            kwargs["callbacks"] = list(tcfg.get("callbacks") or []) + self.callbacks
        kwargs.update(overrides)
        return L.Trainer(**kwargs)

    def engine_for(self, role: str, model: Any, tokenizer: Any) -> Any:
        """The generation engine of `role` (policy / experience), built once per run from `cfg.engine` and
        synced to `model`'s current weights on every call (HF: shares the module; vLLM: pushes weights)."""
        from dreamgym_pl.rollout.engine import make_engine

        eng = self._engines.get(role)
        if eng is None or (getattr(eng, "tokenizer", tokenizer) is not tokenizer):
            if eng is not None and hasattr(eng, "close"):
                eng.close()
            eng = self._engines[role] = make_engine(self.cfg.engine, model, tokenizer)
        else:
            eng.load_weights(model)
        return eng

    def evaluate(self, model: Any, tokenizer: Any, progress: str | bool = False,
                 num_goals: int | None = None) -> dict[str, float]:
        from dreamgym_pl.data import evaluate_policy

        n = self.cfg.eval.num_goals if num_goals is None else num_goals
        tasks = self.env.tasks(self.cfg.eval.split)[:n]
        return evaluate_policy(model, tokenizer, self.env, tasks, self.prompt_cfg, self.cfg.algo.max_new_tokens,
                               self.cfg.eval.batch_size, progress=progress,
                               engine=self.engine_for("policy", model, tokenizer))


# ----- stages ----------------------------------------------------------------------------------------
def stage_collect(run: Run) -> None:
    """Offline episodes of scripted agents on the train goals. Every agent starts at the same goal, so the
    same goals are played by several agents (DPO pairs, contrast for the experience model)."""
    cfg = run.cfg.collect
    tasks = run.env.tasks("train")
    all_trajs: list[Trajectory] = []
    for i, (name, count) in enumerate(cfg.agents.items()):
        if count <= 0:
            continue
        agent_tasks = [tasks[j % len(tasks)] for j in range(count)]
        agent = make_agent(name, seed=run.cfg.seed + i, eps=cfg.noisy_eps, env=run.env)
        trajs = run_episodes(run.env, agent_tasks, agent, batch_size=cfg.batch_size, source=name,
                             progress=f"collect {name}")
        for ep, t in enumerate(trajs):
            for s in t.transitions:
                s.info["episode"] = f"{name}-{ep}"
        stats = episode_stats(trajs)
        run.record({f"collect/{name}_success_rate": stats["success_rate"], f"collect/{name}_episodes": len(trajs)})
        all_trajs += trajs
    transitions = [s for t in all_trajs for s in t.transitions]
    if dist.is_main():
        write_jsonl(run.offline_path, transitions)
    run.record({"collect/real_transitions": len(transitions)})
    run.add_budget("real_transitions", len(transitions))
    run.complete("collect")


def _sft_trajectories(run: Run) -> list[Trajectory]:
    src = run.cfg.sft.source
    trajs = [t for t in run.offline_trajectories() if t.success and (src == "all" or t.source == src)]
    n = run.cfg.sft.num_trajectories
    return trajs[:n] if n else trajs


def stage_sft(run: Run) -> None:
    from dreamgym_pl.data import sft_loader
    from dreamgym_pl.policy.module import PolicyModule

    model, tok = run.load_policy()
    trajs = _sft_trajectories(run)
    loader = sft_loader(trajs, tok, run.prompt_cfg, run.cfg.sft.batch_size, run.cfg.seed)
    c = run.cfg.sft
    module = PolicyModule(model, tok, "sft", lr=c.lr, warmup_steps=c.warmup_steps, total_steps=c.max_steps)
    run.trainer("sft", max_epochs=-1 if c.max_steps > 0 else c.epochs, max_steps=c.max_steps if c.max_steps > 0 else -1,
                gradient_clip_val=1.0).fit(module, loader)
    _finish_policy_stage(run, "sft", module, {"sft/trajectories": len(trajs), "sft/samples": len(loader.dataset)})


def stage_dpo(run: Run) -> None:
    from dreamgym_pl.data import dpo_loader, dpo_pairs
    from dreamgym_pl.policy.module import PolicyModule

    model, tok = run.load_policy()
    pairs = dpo_pairs(run.offline_trajectories(), run.cfg.dpo.max_pairs, run.cfg.seed)
    if not pairs:
        raise RuntimeError("dpo: no (successful, failed) pairs of the same goal in the offline data")
    module = PolicyModule(model, tok, "dpo", lr=run.cfg.dpo.lr, dpo_beta=run.cfg.dpo.beta)
    loader = dpo_loader(pairs, module, run.prompt_cfg, run.cfg.dpo.batch_size, run.cfg.seed)
    run.trainer("dpo", max_epochs=run.cfg.dpo.epochs).fit(module, loader)
    _finish_policy_stage(run, "dpo", module, {"dpo/pairs": len(pairs)})


def algo_config(run: Run):
    from dreamgym_pl.policy.module import AlgoConfig

    return AlgoConfig(**OmegaConf.to_container(run.cfg.algo, resolve=True))


def _resume_dir(run: Run, stage: str) -> Path:
    return run.dir / "checkpoints" / stage / "resume"


def _save_rl_checkpoint(run: Run, stage: str, stream: Any, extra: Callable[[], None] | None = None) -> None:
    """Weights, optimizer and stream counters of an RL stage, written to a new version folder and committed
    by an atomic swap of the CURRENT pointer (a kill mid-save leaves the previous checkpoint)."""
    from dreamgym_pl.models import save_model

    if not dist.is_main():
        return
    root = _resume_dir(run, stage)
    root.mkdir(parents=True, exist_ok=True)
    vdir = root / f"it-{stream.iteration:06d}"
    module = stream.module
    save_model(module.model, module.tokenizer, vdir)
    torch.save(module.trainer.optimizers[0].state_dict(), vdir / "optimizer.pt")
    if module.value_head is not None:
        torch.save(module.value_head.state_dict(), vdir / "value_head.pt")
    atomic_write_json(vdir / "stream.json", stream.state())
    if extra:
        extra()
    tmp = root / "CURRENT.tmp"
    tmp.write_text(vdir.name)
    os.replace(tmp, root / "CURRENT")
    for d in root.glob("it-*"):
        if d.name != vdir.name:
            import shutil

            shutil.rmtree(d, ignore_errors=True)


def _load_rl_checkpoint(run: Run, stage: str) -> tuple[Any, Any, dict | None]:
    """(model, tokenizer, stream state) from the stage's last checkpoint when resuming, else the current policy."""
    from dreamgym_pl.models import load_pretrained

    cur = _resume_dir(run, stage) / "CURRENT"
    if run.cfg.resume and cur.exists():
        vdir = cur.parent / cur.read_text().strip()
        model, tok = load_pretrained(vdir, run.cfg.model.get("dtype", "float32"))
        state = json.loads((vdir / "stream.json").read_text())
        state["optimizer"] = torch.load(vdir / "optimizer.pt", weights_only=True)
        vh = vdir / "value_head.pt"
        state["value_head"] = torch.load(vh, weights_only=True) if vh.exists() else None
        log.info("%s: resuming from iteration %d (%d transitions consumed)", stage, state["iteration"], state["consumed"])
        return model, tok, state
    model, tok = run.load_policy()
    return model, tok, None


def _rl_module(run: Run, model: Any, tok: Any, algo: Any, state: dict | None):
    from dreamgym_pl.policy.module import PolicyModule

    # on resume the KL reference stays the stage's starting policy, not the checkpoint
    ref = run.load_policy()[0] if state and (algo.kl_coef > 0) else None
    # warm-up only from a fresh start: a resumed stage's optimizer state is already past it
    module = PolicyModule(model, tok, algo.name, lr=algo.lr, algo=algo, ref_model=ref,
                          warmup_steps=0 if state else algo.warmup_steps)
    if state and state.get("value_head") is not None and module.value_head is not None:
        module.value_head.load_state_dict(state["value_head"])
    return module


def _real_rl(run: Run, stage: str, budget: int, tasks_per_iter: int, max_iters: int) -> None:
    from torch.utils.data import DataLoader

    from dreamgym_pl.data import RolloutStream

    algo = algo_config(run)
    model, tok, state = _load_rl_checkpoint(run, stage)
    module = _rl_module(run, model, tok, algo, state)
    stream = RolloutStream(module, run.env, run.env.tasks("train"), algo, run.prompt_cfg, budget, tasks_per_iter,
                           max_iters, seed=run.cfg.seed, source="real",
                           on_iteration=_hooks(_text_logger(module), _test_curve(run, module)),
                           checkpoint=lambda s: _save_rl_checkpoint(run, stage, s),
                           checkpoint_every=run.cfg.checkpoint_every, resume_state=state,
                           engine_factory=lambda m, t: run.engine_for("policy", m, t))
    run.trainer(stage, max_epochs=1, gradient_clip_val=algo.grad_clip).fit(module, DataLoader(stream, batch_size=None))
    _plot_history(run, stage, stream.history)
    _rank_report(run, stage, stream, module)
    _finish_policy_stage(run, stage, module, {f"{stage}/real_transitions": stream.consumed,
                                              f"{stage}/iterations": stream.iteration,
                                              f"{stage}/transitions_per_s": stream.transitions_per_s})
    run.add_budget("real_transitions", stream.consumed)


def _rank_report(run: Run, stage: str, stream: Any, module: Any, **extra: Any) -> None:
    """ranks/<stage>_rank<r>.json: what this rank rolled out and a digest of its weights after the stage
    (data-parallel runs: the digests must agree and the task ids of an iteration must not repeat)."""
    import hashlib

    h = hashlib.sha1()
    for name, p in sorted(module.model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().float().numpy().tobytes())
    d = run.dir / "ranks"
    d.mkdir(exist_ok=True)
    atomic_write_json(d / f"{stage}_rank{dist.rank()}.json",
                      {"rank": dist.rank(), "world": dist.world(), "tasks": stream.rank_log,
                       "local_transitions": stream.local_consumed, "transitions": stream.consumed,
                       "weights_sha1": h.hexdigest(), **extra})


def _text_logger(module: Any, every: int = 5):
    """An on_iteration hook that writes a few sampled trajectories to TensorBoard as text."""

    def hook(it: int, trajs: list, logs: dict) -> None:
        if it % every or module.logger is None:
            return
        lines = []
        for t in trajs[:3]:
            acts = " -> ".join(s.action for s in t.transitions)
            lines.append(f"**{t.task.instruction}**  \n{acts}  \nreward {t.final_reward:.2f}")
        module.logger.experiment.add_text("rollout/samples", "\n\n".join(lines), it)

    return hook


def _test_curve(run: Run, module: Any):
    """An on_iteration hook that, every `eval.curve_every` iterations, evaluates the current policy greedily on
    the first `eval.curve_goals` test goals (before this iteration's update) and adds `test/success_rate`
    and `test/mean_score` to the iteration's logs: the curve of test success against transitions."""
    every, goals = int(run.cfg.eval.curve_every), int(run.cfg.eval.curve_goals)

    def hook(it: int, trajs: list, logs: dict) -> None:
        if every <= 0 or it % every:
            return
        was_training = module.model.training
        res = run.evaluate(module.model, module.tokenizer, num_goals=goals)
        module.model.train(was_training)
        logs.update({"test/success_rate": res["success_rate"], "test/mean_score": res["mean_score"]})
        module.pending_logs.update({"test/success_rate": res["success_rate"], "test/mean_score": res["mean_score"]})

    return hook


def _hooks(*hooks: Any):
    def run_all(it: int, trajs: list, logs: dict) -> None:
        for h in hooks:
            h(it, trajs, logs)

    return run_all


def stage_rl(run: Run) -> None:
    """GRPO/PPO against the real env from the current policy (the paper's real-env baselines)."""
    c = run.cfg.rl
    _real_rl(run, "rl", c.real_budget, c.tasks_per_iter, c.max_iters)


def stage_s2r(run: Run) -> None:
    """DreamGym-S2R: continue RL in the real env with a small real budget after synthetic RL."""
    c = run.cfg.s2r
    _real_rl(run, "s2r", c.real_budget, c.tasks_per_iter, c.max_iters)


def _finish_policy_stage(run: Run, stage: str, module: Any, extra: dict[str, float]) -> None:
    rel = run.save_policy(module.model, module.tokenizer, stage)
    res = run.evaluate(module.model, module.tokenizer, progress=f"eval after {stage}")
    run.record({**extra, f"{stage}/test_success_rate": res["success_rate"], f"{stage}/test_mean_score": res["mean_score"],
                f"{stage}/test_invalid_action_rate": res["invalid_action_rate"]})
    log.info("%s: test success %.3f, mean score %.3f", stage, res["success_rate"], res["mean_score"])
    run.complete(stage, policy=rel)


def _plot_history(run: Run, stage: str, history: list[dict[str, float]]) -> None:
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


def stage_eval(run: Run) -> None:
    cfg = run.cfg.eval
    tasks = run.env.tasks(cfg.split)[: cfg.num_goals]
    if cfg.agent == "policy":
        model, tok = run.load_policy()
        res = run.evaluate(model, tok, progress="eval")
    else:
        agent = make_agent(cfg.agent, seed=run.cfg.seed, eps=run.cfg.collect.noisy_eps, env=run.env)
        res = episode_stats(run_episodes(run.env, tasks, agent, batch_size=cfg.batch_size, source=cfg.agent,
                                         progress=f"eval {cfg.agent}"))
    run.record({"eval/success_rate": res["success_rate"], "eval/mean_score": res["mean_score"],
                "eval/invalid_action_rate": res["invalid_action_rate"], "eval/num_goals": len(tasks)})
    log.info("eval (%s, %d %s goals): success %.3f, mean score %.3f", cfg.agent, len(tasks), cfg.split,
             res["success_rate"], res["mean_score"])
    run.complete("eval")


def experience_format(run: Run):
    from dreamgym_pl.experience.format import ExperienceFormat

    e = run.cfg.experience
    return ExperienceFormat(history=e.history, k=run.cfg.replay.k, demo_words=e.demo_words, state_words=e.state_words,
                            reasoning=e.reasoning)


def replay_path(run: Run) -> Path:
    return run.dir / "replay"


def save_replay(run: Run, buffer: Any) -> None:
    if dist.is_main():
        buffer.save(replay_path(run))


def load_replay(run: Run):
    from dreamgym_pl.replay.buffer import ReplayBuffer
    from dreamgym_pl.replay.embed import make_embedder

    emb = make_embedder(run.cfg.replay.embedder, run.cfg.replay.dim)
    if (replay_path(run) / "CURRENT").exists():
        return ReplayBuffer.load(replay_path(run), emb)
    return ReplayBuffer(emb, capacity=run.cfg.replay.capacity, max_size=run.cfg.replay.max_size)


def stage_experience(run: Run) -> None:
    """Annotate offline transitions with reasoning, seed the replay buffer, train the experience model,
    judge it on held-out real trajectories."""
    from dreamgym_pl.experience.annotate import annotate
    from dreamgym_pl.experience.format import target_length_report
    from dreamgym_pl.experience.judge import judge_steps
    from dreamgym_pl.experience.module import ExperienceModule, experience_loaders
    from dreamgym_pl.models import build_tiny_llama, load_pretrained

    e = run.cfg.experience
    trajs = run.offline_trajectories()
    annotate(trajs)
    buffer = load_replay(run)
    buffer.add([t for tr in trajs for t in tr.transitions], source="offline")
    save_replay(run, buffer)
    if e.max_transitions:
        kept, n = [], 0
        for tr in trajs:  # whole trajectories, in collection order, up to the transition bound
            if n >= e.max_transitions:
                break
            kept.append(tr)
            n += len(tr.transitions)
        trajs = kept
    if run.cfg.model.name_or_path == "tiny":  # a fresh tiny Llama sharing the run's word tokenizer
        _, tok = run.load_policy()
        m = run.cfg.model
        model = build_tiny_llama(tok, m.hidden_size, m.num_layers, m.num_heads, m.intermediate_size, m.max_positions,
                                 run.cfg.seed + 1)
    else:
        model, tok = load_pretrained(run.cfg.model.name_or_path, run.cfg.model.dtype,
                                     run.cfg.model.trust_remote_code, lora=run.cfg.model.get("lora"))
    fmt = experience_format(run)
    gen_examples = task_generation_examples(run, tok)
    train_dl, val_dl, held_out = experience_loaders(trajs, tok, fmt, buffer, e.batch_size, e.val_fraction, run.cfg.seed,
                                                    extra=gen_examples)
    gen_ids = {id(g) for g in gen_examples}  # task-generation examples have their own, shorter bound
    lengths = target_length_report([len(s.response_ids) for s in train_dl.dataset if id(s) not in gen_ids],
                                   e.max_new_tokens)
    if lengths["over_share"] > 0.01:
        log.warning("experience: %.0f%% of training targets are longer than experience.max_new_tokens=%d (longest %d "
                    "tokens, p95 %d): their generations are cut before <reward>/<done> and count as invalid; "
                    "raise experience.max_new_tokens", 100 * lengths["over_share"], e.max_new_tokens,
                    lengths["max_len"], lengths["p95_len"])
    module = ExperienceModule(model, tok, lr=e.lr, warmup_steps=e.warmup_steps, total_steps=e.max_steps)
    run.trainer("experience", max_epochs=-1 if e.max_steps > 0 else e.epochs,
                max_steps=e.max_steps if e.max_steps > 0 else -1, gradient_clip_val=1.0,
                val_check_interval=min(200, e.max_steps) if e.max_steps > 0 else None,
                check_val_every_n_epoch=None if e.max_steps > 0 else 1).fit(module, train_dl, val_dl)
    rel = run.save_policy(module.model, tok, "experience")
    res = judge_steps(run.engine_for("experience", module.model, tok), held_out, buffer, fmt, e.judge_steps, max_new_tokens=e.max_new_tokens)
    run.record({**res, "experience/train_samples": len(train_dl.dataset), "experience/replay_size": len(buffer),
                "experience/task_generation_examples": len(gen_examples),
                "experience/targets_over_max_new_tokens": lengths["over_share"],
                "experience/target_max_tokens": lengths["max_len"]})
    log.info("experience: %s", {k: round(v, 3) for k, v in res.items()})
    run.state["experience"] = rel
    run.complete("experience")


def task_generation_examples(run: Run, tok: Any) -> list:
    """Teach the experience model the task-generator format (M_task shares its parameters): seed task ->
    a related train task of the same category (the goal's category where the env has one)."""
    from dreamgym_pl.curriculum import task_generation_prompt
    from dreamgym_pl.policy.samples import StepSample

    n = run.cfg.curriculum.train_examples
    if n <= 0:
        return []
    tasks = run.env.tasks("train")
    by_cat: dict[str, list] = {}
    for t in tasks:
        by_cat.setdefault(str(t.goal.get("category", "")), []).append(t)
    rng = random.Random(run.cfg.seed)
    out = []
    for _ in range(n):
        a = rng.choice(tasks)
        pool = by_cat[str(a.goal.get("category", ""))]
        b = rng.choice(pool)
        if b.task_id == a.task_id and len(pool) > 1:
            b = rng.choice([x for x in pool if x.task_id != a.task_id])
        p = tok(task_generation_prompt(a.instruction), add_special_tokens=False)["input_ids"]
        t = tok(f"<task> {b.instruction} </task>", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        out.append(StepSample(p, t))
    return out


def make_curriculum(run: Run, senv: Any, algo: Any):
    from dreamgym_pl.core import Task, from_dict, iter_jsonl
    from dreamgym_pl.curriculum import Curriculum, CurriculumState
    from dreamgym_pl.rollout.engine import SamplingParams

    c = run.cfg.curriculum
    params = SamplingParams(temperature=c.temperature, max_new_tokens=c.max_words + 8, stop=["</task>", "< / task >"])
    generate = lambda prompts: [x.text for x in senv.engine.generate(prompts, params)]  # noqa: E731
    embed = None
    if algo.name == "ppo":
        from dreamgym_pl.replay.embed import make_embedder

        embed = make_embedder(run.cfg.replay.embedder, run.cfg.replay.dim).embed
    state = None
    sdir = run.dir / "curriculum"
    if run.cfg.resume and (sdir / "state.json").exists():
        raw = json.loads((sdir / "state.json").read_text())
        gen = [from_dict(Task, d) for d in iter_jsonl(sdir / "generated_tasks.jsonl")] if (sdir / "generated_tasks.jsonl").exists() else []
        state = CurriculumState(values=raw["values"], generated=gen, rejected=raw["rejected"], shares=raw["shares"])
    return Curriculum(run.env.tasks("train"), generate, c.lambda_, c.min_variance, c.num_seeds,
                      run.cfg.synthetic_rl.tasks_per_iter, run.cfg.seed, algo.name, embed, c.num_clusters,
                      c.max_words, state)


def save_curriculum(run: Run, cur: Any) -> None:
    if not dist.is_main():
        return
    sdir = run.dir / "curriculum"
    st = cur.state
    atomic_write_json(sdir / "state.json", {"values": st.values, "rejected": st.rejected, "shares": st.shares})
    write_jsonl(sdir / "generated_tasks.jsonl", st.generated)


def initial_observation(env: Any, task: Any) -> Any:
    """The real env's first observation of a task (a fixed function of the task: no transition). A
    curriculum-generated task starts where its parent task starts (its parent's game / initial page), with its
    own instruction."""
    from dreamgym_pl.core import Task

    g = task.goal or {}
    if g.get("generated") and isinstance(g.get("parent_goal"), dict):
        task = Task(task.task_id, task.instruction, dict(g["parent_goal"]), task.parent_id, task.generation)
    return env.reset([task])[0]


def make_synthetic_env(run: Run, buffer):
    from dreamgym_pl.experience.synthetic_env import SyntheticEnv
    from dreamgym_pl.models import load_pretrained
    from dreamgym_pl.rollout.engine import SamplingParams

    model, tok = load_pretrained(run.dir / run.state.get("experience", "checkpoints/experience"),
                                 run.cfg.model.get("dtype", "float32"))
    e = run.cfg.experience
    params = SamplingParams(temperature=e.temperature, max_new_tokens=e.max_new_tokens, stop=["</done>", "< / done >"])
    first = lambda task: initial_observation(run.env, task)  # noqa: E731 - no real transition is consumed
    return SyntheticEnv(run.engine_for("experience", model, tok), buffer, experience_format(run), first, run.env.tasks,
                        run.env.max_steps, params)


def stage_synthetic_rl(run: Run) -> None:
    """GRPO/PPO against the experience model (DreamGym); consumes no real transitions."""
    from torch.utils.data import DataLoader

    from dreamgym_pl.data import RolloutStream

    algo = algo_config(run)
    cfg = run.cfg.synthetic_rl
    buffer = load_replay(run)
    senv = make_synthetic_env(run, buffer)
    model, tok, state = _load_rl_checkpoint(run, "synthetic_rl")
    module = _rl_module(run, model, tok, algo, state)
    cur = make_curriculum(run, senv, algo)

    senv.defer_enrich = dist.world() > 1

    def on_iteration(it: int, trajs: list, logs: dict) -> None:
        if senv.defer_enrich:
            senv.sync_enrichment()
        logs.update(cur.last_logs)
        module.pending_logs.update(cur.last_logs)
        if cur.last_new and module.logger is not None:
            module.logger.experiment.add_text("curriculum/generated_tasks",
                                              "\n\n".join(f"{t.task_id} (from {t.parent_id}): {t.instruction}"
                                                           for t in cur.last_new[:8]), it)

    hooks = _hooks(on_iteration, _text_logger(module), _test_curve(run, module))
    stream = RolloutStream(module, senv, run.env.tasks("train"), algo, run.prompt_cfg, cfg.synthetic_budget,
                           cfg.tasks_per_iter, cfg.max_iters, seed=run.cfg.seed, source="synthetic",
                           on_iteration=hooks, task_sampler=cur.sample,
                           checkpoint=lambda st: _save_rl_checkpoint(run, "synthetic_rl", st, lambda: (
                               save_replay(run, buffer), save_curriculum(run, cur))),
                           checkpoint_every=run.cfg.checkpoint_every, resume_state=state,
                           engine_factory=lambda m, t: run.engine_for("policy", m, t))
    run.trainer("synthetic_rl", max_epochs=1, gradient_clip_val=algo.grad_clip).fit(module, DataLoader(stream, batch_size=None))
    save_replay(run, buffer)
    save_curriculum(run, cur)
    shares = cur.state.shares
    run.record({"curriculum/synthetic_share": sum(shares) / max(1, len(shares)),
                "curriculum/max_share": max(shares) if shares else 0.0,
                "curriculum/num_generated": len(cur.state.generated), "curriculum/rejected": cur.state.rejected})
    _plot_history(run, "synthetic_rl", stream.history)
    _rank_report(run, "synthetic_rl", stream, module, replay_size=len(buffer), own_unique=len(senv.own_digests))
    st = senv.stats
    gen = max(st["generate_s"], 1e-9)
    _finish_policy_stage(run, "synthetic_rl", module, {
        "synthetic_rl/real_transitions": 0, "synthetic_rl/synthetic_transitions": stream.consumed,
        "synthetic_rl/iterations": stream.iteration, "synthetic_rl/transitions_per_s": stream.transitions_per_s,
        "synthetic_rl/invalid_output_rate": st["invalid_outputs"] / max(1, st["steps"]),
        "synthetic_rl/overhead_share": (st["retrieval_s"] + st["prompt_s"] + st["parse_s"]) / gen,
        "synthetic_rl/replay_size": len(buffer)})
    run.add_budget("synthetic_transitions", stream.consumed)
    run.add_budget("real_transitions", 0)


STAGES: dict[str, Callable[[Run], None]] = {
    "collect": stage_collect,
    "sft": stage_sft,
    "dpo": stage_dpo,
    "rl": stage_rl,
    "experience": stage_experience,
    "synthetic_rl": stage_synthetic_rl,
    "s2r": stage_s2r,
    "eval": stage_eval,
}


def run_pipeline(cfg: DictConfig, run_dir: str | Path, callbacks: list | None = None) -> dict[str, float]:
    """Validate the config, then run each requested stage not already completed (with resume=true).
    `callbacks`: extra Lightning callbacks attached to every training stage's Trainer."""
    config_checks.validate(cfg, run_dir)
    dist.init_from_env(str(cfg.trainer.get("accelerator", "cpu")))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    run = Run(cfg, run_dir, callbacks)
    if dist.is_main():  # the config of the latest invocation, resolved (benchmarks and tools reload it)
        (run.dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    for stage in cfg.stages:
        if cfg.resume and stage in run.state["completed"]:
            log.info("stage %s: already completed, skipped (resume)", stage)
            continue
        log.info("stage %s: start", stage)
        t0 = time.perf_counter()
        STAGES[stage](run)
        dist.barrier()  # every rank finishes a stage (and rank 0 its files) before the next one starts
        run.record({f"{stage}/seconds": time.perf_counter() - t0})
        log.info("stage %s: done in %.1f s", stage, time.perf_counter() - t0)
    return run.metrics
