"""Config checks that run before any work: a wrong config fails at once and names the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dreamgym_pl.config_keys import check_keys
from dreamgym_pl.envs.base import SCRIPTED_AGENTS, env_agents


class ConfigError(ValueError):
    """A config value that cannot work; the message starts with the key."""


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, throw_on_missing=False)


def _require(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


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
    check_keys(cfg, ConfigError)  # one rule per key (dreamgym_pl/config_keys.py)

    def require_agent(name: str, key: str, also: str = "") -> None:
        """The env's module is imported only for a name outside the common three."""
        if name not in SCRIPTED_AGENTS and name not in env_agents(env_name):
            raise ConfigError(f"{key}: unknown scripted agent {name!r} for {env_name}; known: "
                              f"{list(env_agents(env_name))}{also}")

    for section in ("collect.agents", "experience.outcome_agents"):
        for name, n in (_get(cfg, section) or {}).items():
            require_agent(name, f"{section}.{name}")
            _require(isinstance(n, int) and n >= 0, f"{section}.{name}", f"episode count must be an integer >= 0, got {n!r}")
    for key, extra in (("eval.agent", "policy"), ("sft.source", "all")):
        value = _get(cfg, key)
        if value is not None and value != extra:
            require_agent(str(value), key, f" (or {extra})")
    source, stages = _get(cfg, "sft.source"), list(_get(cfg, "stages") or [])
    if "collect" in stages and "sft" in stages and source not in (None, "all"):
        _require(int((_get(cfg, "collect.agents") or {}).get(source, 0)) > 0, "sft.source",
                 f"clones {source!r} episodes, but collect.agents.{source} plays none: set it > 0 or choose another source")
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
        zero = strategy.get("stage", 2) if isinstance(strategy, DictConfig) else (3 if "stage_3" in target else 2)
        _require(zero != 3, "trainer.strategy.stage",
                 "ZeRO-3 is not supported: it partitions the parameters, and in-process generation, saving checkpoints "
                 "and the vLLM weight sync read whole parameters; use stage 2 (offload_optimizer: true saves memory)")
    if "synthetic_rl" in stages and "experience" not in stages:
        exp = Path(run_dir) / "checkpoints" / "experience" if run_dir is not None else None
        _require(exp is not None and ((exp / "config.json").exists() or (exp / "adapter_config.json").exists()),
                 "stages", "synthetic_rl needs a trained experience model: add the experience stage")
    algo_name = _get(cfg, "algo.name")
    exp_model = str(_get(cfg, "experience.model") or "policy")
    if "experience" in stages and exp_model != "policy":
        _check_model_source("experience.model", exp_model)
    if _get(cfg, "model.name_or_path") not in (None, "tiny"):
        _check_model_source("model.name_or_path", str(_get(cfg, "model.name_or_path")))
    _require(algo_name in RL_ALGORITHMS, "algo.name", f"unknown algorithm {algo_name!r}; known: {sorted(RL_ALGORITHMS)}")
    algo = OmegaConf.to_container(cfg.algo, resolve=True)
    try:
        rl_algorithm(algo)
    except (KeyError, TypeError) as e:
        raise ConfigError(str(e).strip("'\"")) from e
    for stage in ("rl", "s2r"):  # a hard budget below one task's longest episodes would run no iteration at all
        budget = _get(cfg, f"{stage}.real_budget")
        per_task = (algo.get("group_size") or 1) * _get(cfg, "env.max_steps")
        if stage in stages and _get(cfg, f"{stage}.budget_cap") and budget and budget < per_task:
            raise ConfigError(f"{stage}.real_budget: {budget} fits not one task under {stage}.budget_cap (its episodes "
                              f"may take {per_task} transitions: algo.group_size x env.max_steps); raise it or set "
                              f"{stage}.budget_cap=false")
    off = _get(cfg, "offline_file")
    has_offline = bool(off) or (run_dir is not None and (Path(run_dir) / "offline" / "transitions.jsonl").exists())
    if any(s in stages for s in ("sft", "dpo")) and "collect" not in stages:
        _require(has_offline, "stages",
                 "sft/dpo need offline data: add the collect stage, or set offline_file to a transitions.jsonl")


def _check_model_source(key: str, name: str) -> None:
    """Before any work: a packaged checkpoint (models.PACKAGED) must be installed (the error says how), and
    `experience.model` must name a conf/model file, a packaged checkpoint or an existing folder / file."""
    from dreamgym_pl.models import PACKAGED, packaged_file
    from dreamgym_pl.model_files import CONF_MODELS, is_model_file, model_file

    if key == "experience.model":
        if is_model_file(name):
            name = str(model_file(name)["name_or_path"])
            if name == "tiny":
                raise ConfigError(f"{key}: the tiny model is the policy's (experience.model=policy builds it)")
        elif name not in PACKAGED and not Path(name).exists():
            known = sorted(p.stem for p in CONF_MODELS.glob("*.yaml") if p.stem not in ("hf", "tiny"))
            raise ConfigError(f"{key}: {name!r} is neither policy, a conf/model file ({', '.join(known)}), a packaged "
                              f"checkpoint ({', '.join(PACKAGED)}) nor an existing folder or .gguf file")
    if name in PACKAGED:
        try:
            packaged_file(name)
        except FileNotFoundError as err:
            raise ConfigError(f"{key}: {err}") from None
