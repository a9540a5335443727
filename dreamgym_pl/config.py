"""Config checks that run before any work: a wrong config fails at once and names the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dreamgym_pl.envs.base import SCRIPTED_AGENTS


class ConfigError(ValueError):
    """A config value that cannot work; the message starts with the key."""


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, throw_on_missing=False)


def _require(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


def _positive(cfg: DictConfig, key: str, allow_zero: bool = False) -> None:
    v = _get(cfg, key)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (v >= 0 if allow_zero else v > 0)
    _require(ok, key, f"must be {'>= 0' if allow_zero else '> 0'}, got {v!r}")


def validate(cfg: DictConfig, run_dir: str | Path | None = None) -> None:
    from dreamgym_pl.envs.base import known_envs
    from dreamgym_pl.policy.algos import RL_ALGORITHMS, rl_algorithm
    from dreamgym_pl.stages import STAGES

    stages = list(_get(cfg, "stages") or [])
    _require(len(stages) > 0, "stages", "no stage to run")
    for s in stages:
        _require(s in STAGES, "stages", f"unknown stage {s!r}; known: {list(STAGES)}")
    env_name = _get(cfg, "env.name")
    _require(env_name in known_envs(), "env.name", f"unknown environment {env_name!r}; known: {known_envs()}")
    for key in ("env.max_steps", "env.num_products", "env.goals_per_product", "env.num_test", "env.results_per_page",
                "env.max_results"):
        if _get(cfg, key) is not None:
            _positive(cfg, key)
    for key in ("env.products_file", "env.attributes_file"):
        p = _get(cfg, key)
        if p:
            _require(Path(p).exists(), key, f"file {p!r} not found")
    agents = _get(cfg, "collect.agents") or {}
    for name, n in agents.items():
        _require(name in SCRIPTED_AGENTS, f"collect.agents.{name}", f"unknown scripted agent; known: {list(SCRIPTED_AGENTS)}")
        _require(isinstance(n, int) and n >= 0, f"collect.agents.{name}", f"episode count must be an integer >= 0, got {n!r}")
    eps = _get(cfg, "collect.noisy_eps")
    _require(isinstance(eps, (int, float)) and 0 <= eps <= 1, "collect.noisy_eps", f"must lie in [0, 1], got {eps!r}")
    for key in ("collect.batch_size", "eval.num_goals", "eval.batch_size", "sft.batch_size", "sft.epochs", "sft.lr",
                "rl.tasks_per_iter", "dpo.batch_size", "dpo.lr", "algo.group_size", "algo.mini_batch_size",
                "algo.ppo_epochs", "algo.max_new_tokens", "algo.lr"):
        if _get(cfg, key) is not None:
            _positive(cfg, key)
    for key in ("experience.epochs", "experience.lr", "experience.batch_size", "experience.max_new_tokens",
                "replay.dim", "replay.capacity", "synthetic_rl.tasks_per_iter", "rollout.batch_size", "prompt.max_tokens",
                "experience.max_prompt_tokens", "experience.max_target_tokens", "experience.val_every",
                "experience.grad_clip", "sft.grad_clip"):
        if _get(cfg, key) is not None:
            _positive(cfg, key)
    for key in ("experience.history", "experience.max_transitions", "replay.k", "synthetic_rl.synthetic_budget",
                "eval.curve_every", "eval.curve_goals", "replay.overfetch", "rollout.samples_every",
                "experience.onpolicy_episodes", "experience.policy_episodes"):
        if _get(cfg, key) is not None:
            _positive(cfg, key, allow_zero=True)
    lam = _get(cfg, "curriculum.lambda_")
    _require(isinstance(lam, (int, float)) and 0 <= lam <= 1, "curriculum.lambda_", f"must lie in [0, 1], got {lam!r}")
    mv = _get(cfg, "curriculum.min_variance")
    _require(isinstance(mv, (int, float)) and 0 < mv <= 0.25, "curriculum.min_variance", f"must lie in (0, 0.25], got {mv!r}")
    for key in ("curriculum.num_seeds", "curriculum.num_clusters", "curriculum.max_words"):
        _positive(cfg, key)
    _require(_get(cfg, "replay.embedder") in ("hashing", "minilm"), "replay.embedder", "must be hashing or minilm")
    _require(_get(cfg, "replay.exclude") in ("task", "episode", "none"), "replay.exclude", "must be task, episode or none")
    _require(_get(cfg, "experience.invalid_action") in ("stay", "end", "model"), "experience.invalid_action",
             "must be stay, end or model")
    vf = _get(cfg, "experience.val_fraction")
    _require(isinstance(vf, (int, float)) and 0 <= vf < 1, "experience.val_fraction", f"must lie in [0, 1), got {vf!r}")
    engine = _get(cfg, "engine.name") or "hf"
    _require(engine in ("hf", "vllm"), "engine.name", f"must be hf or vllm, got {engine!r}")
    if engine == "vllm":  # fail before any work when vLLM or a GPU is missing
        from dreamgym_pl.rollout.vllm_engine import import_vllm

        try:
            import_vllm()
        except RuntimeError as e:
            raise ConfigError(f"engine.name: {e}") from e
    strategy = _get(cfg, "trainer.strategy")
    target = strategy.get("_target_", "") if isinstance(strategy, DictConfig) else str(strategy or "")
    if "deepspeed" in target.lower():
        _require(_get(cfg, "trainer.accelerator") in ("gpu", "cuda", "auto"), "trainer.accelerator",
                 "DeepSpeed runs on CUDA GPUs only (Lightning refuses it on CPU); use trainer=cpu here")
    if "synthetic_rl" in stages and "experience" not in stages:
        _require(run_dir is not None and (Path(run_dir) / "checkpoints" / "experience" / "config.json").exists(),
                 "stages", "synthetic_rl needs a trained experience model: add the experience stage")
    for key in ("s2r.real_budget", "rl.real_budget", "sft.num_trajectories", "prompt.history", "algo.kl_coef", "algo.entropy_coef"):
        if _get(cfg, key) is not None:
            _positive(cfg, key, allow_zero=True)
    agent = _get(cfg, "eval.agent")
    _require(agent in ("policy",) + SCRIPTED_AGENTS, "eval.agent", f"must be policy or one of {list(SCRIPTED_AGENTS)}, got {agent!r}")
    _require(_get(cfg, "eval.split") in ("train", "test"), "eval.split", "must be train or test")
    algo_name = _get(cfg, "algo.name")
    _require(algo_name in RL_ALGORITHMS, "algo.name", f"unknown algorithm {algo_name!r}; known: {sorted(RL_ALGORITHMS)}")
    try:
        rl_algorithm(OmegaConf.to_container(cfg.algo, resolve=True))
    except (KeyError, TypeError) as e:
        raise ConfigError(str(e).strip("'\"")) from e
    _require(_get(cfg, "algo.agg") in ("token-mean", "seq-mean"), "algo.agg", "must be token-mean or seq-mean")
    _require(_get(cfg, "algo.kl_kind") in ("k1", "k3"), "algo.kl_kind", "must be k1 or k3")
    _require(_get(cfg, "algo.reward") in ("score", "success"), "algo.reward", "must be score or success")
    src = _get(cfg, "sft.source")
    _require(src in SCRIPTED_AGENTS + ("all",), "sft.source", f"must be one of {list(SCRIPTED_AGENTS) + ['all']}")
    off = _get(cfg, "offline_file")
    if off:
        _require(Path(off).exists(), "offline_file", f"file {off!r} not found")
    has_offline = bool(off) or (run_dir is not None and (Path(run_dir) / "offline" / "transitions.jsonl").exists())
    if any(s in stages for s in ("sft", "dpo")) and "collect" not in stages:
        _require(has_offline, "stages",
                 "sft/dpo need offline data: add the collect stage, or set offline_file to a transitions.jsonl")
