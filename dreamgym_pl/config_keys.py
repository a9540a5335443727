"""One rule per config key: the table that `config.validate` checks before any work starts (the
rule vocabulary: `config_rules.py`).

Every leaf key of `conf/config.yaml` and of the config groups (`conf/*/*.yaml`; the `algo` options are dataclasses
whose fields carry their rules: `algo_config.py`) has a rule here, keyed by its dotted name (`*` matches one level:
`collect.agents.*`); tests/test_config.py walks every file and fails on a key without one. A rule says which values it allows (the words of the error) and carries a value it rejects
(the test sets it and expects an error naming the key). A key a group does not define (e.g. `env.nb_rooms`
outside TextWorld) is skipped. Checks across keys (a stage needing another's output, DeepSpeed on a GPU)
stay in `config.validate`.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from dreamgym_pl.algo_config import rules as algo_rules
from dreamgym_pl.config_rules import (BOOL, DTYPES, FILE, NONNEG, NONNEG_INT, POS, POS_INT, PRECISIONS, PROB, TEXT,
                                      Lazy, Rule, integer, is_devices, is_env_name, is_int,
                                      is_stage_list, is_str_list, is_strategy, nullable, number, one_of, stage_words)


RULES: dict[str, Rule] = {
    # ----- root --------------------------------------------------------------------------------
    "stages": Lazy(is_stage_list, stage_words, ["collect", "teleport"]),
    "seed": integer(),
    "resume": BOOL,
    "checkpoint_every": POS_INT,
    "checkpoint_steps": POS_INT,
    "micro_batches": POS_INT,
    "offline_file": FILE,
    # ----- collect / sft / dpo -----------------------------------------------------------------
    "collect.agents.*": NONNEG_INT,
    "collect.noisy_eps": PROB,
    "collect.batch_size": POS_INT,
    "sft.source": TEXT,  # all or a scripted agent of the env: checked in config.validate (env_agents)
    "sft.num_trajectories": NONNEG_INT,
    "sft.min_score": nullable(PROB),
    "sft.max_steps": integer(),
    "sft.epochs": POS_INT,
    "sft.warmup_steps": NONNEG_INT,
    "sft.lr": POS,
    "sft.batch_size": POS_INT,
    "sft.grad_clip": nullable(POS),
    "sft.copy_steps": NONNEG_INT,
    "sft.copy_examples": NONNEG_INT,
    "sft.copy_length": integer(4),
    "dpo.beta": POS,
    "dpo.epochs": POS_INT,
    "dpo.lr": POS,
    "dpo.batch_size": POS_INT,
    "dpo.max_pairs": POS_INT,
    # ----- RL stages ---------------------------------------------------------------------------
    "rl.real_budget": NONNEG_INT,
    "rl.tasks_per_iter": POS_INT,
    "rl.max_iters": POS_INT,
    "synthetic_rl.synthetic_budget": NONNEG_INT,
    "synthetic_rl.tasks_per_iter": POS_INT,
    "synthetic_rl.max_iters": POS_INT,
    "s2r.real_budget": NONNEG_INT,
    "s2r.tasks_per_iter": POS_INT,
    "s2r.max_iters": POS_INT,
    "*.budget_cap": BOOL,  # rl and s2r
    # ----- experience model --------------------------------------------------------------------
    "experience.model": TEXT,
    "experience.lora": nullable(BOOL),
    "experience.precision": nullable(one_of(*PRECISIONS)),
    "experience.reasoning": BOOL,
    "experience.history": NONNEG_INT,
    "experience.demo_words": POS_INT,
    "experience.ending_rules": BOOL,
    "experience.state_words": POS_INT,
    "experience.max_transitions": NONNEG_INT,
    "experience.max_steps": integer(),
    "experience.epochs": POS_INT,
    "experience.warmup_steps": NONNEG_INT,
    "experience.lr": POS,
    "experience.batch_size": POS_INT,
    "experience.grad_clip": nullable(POS),
    "experience.terminal_repeat": POS_INT,
    "experience.ending_steps": NONNEG_INT,
    "experience.ending_lr": POS,
    "experience.val_every": POS_INT,
    "experience.max_prompt_tokens": POS_INT,
    "experience.max_target_tokens": POS_INT,
    "experience.val_fraction": number(0, 1, hi_open=True),
    "experience.judge_steps": NONNEG_INT,
    "experience.onpolicy_episodes": NONNEG_INT,
    "experience.temperature": NONNEG,
    "experience.invalid_action": one_of("end", "stay", "model"),
    "experience.max_new_tokens": POS_INT,
    "experience.refresh_every": NONNEG_INT,
    "experience.refresh_episodes": POS_INT,
    "experience.refresh_steps": POS_INT,
    "experience.refresh_lr": POS,
    "experience.outcome_model": one_of("minilm", "none"),
    "experience.outcome_steps": POS_INT,  # outcome_model=none is the off switch
    "experience.outcome_lr": POS,
    "experience.outcome_batch_size": POS_INT,
    "experience.outcome_max_length": POS_INT,
    "experience.outcome_agents.*": NONNEG_INT,
    "experience.outcome_agents": Rule(lambda v: hasattr(v, "keys") and all(is_int(n) and n >= 0 for n in v.values()),
                                      "a mapping of scripted agent -> episodes ({} for none)", 3),
    # ----- replay / curriculum -----------------------------------------------------------------
    "replay.embedder": one_of("hashing", "minilm"),
    "replay.dim": POS_INT,
    "replay.k": NONNEG_INT,
    "replay.exclude": one_of("task", "episode", "none"),
    "replay.synthetic_demos": BOOL,
    "replay.overfetch": NONNEG_INT,
    "replay.online_k": NONNEG_INT,
    "replay.capacity": POS_INT,
    "replay.max_size": nullable(POS_INT),
    "curriculum.lambda_": PROB,
    "curriculum.max_uses": NONNEG_INT,
    "curriculum.min_variance": number(0, 0.25, lo_open=True),
    "curriculum.num_seeds": POS_INT,
    "curriculum.train_examples": NONNEG_INT,
    "curriculum.family": one_of("none", "prompt", "slot"),
    "curriculum.num_clusters": POS_INT,
    "curriculum.max_words": POS_INT,
    "curriculum.temperature": NONNEG,
    # ----- eval / rollout / prompt -------------------------------------------------------------
    "eval.agent": TEXT,  # policy or a scripted agent of the env: checked in config.validate (env_agents)
    "eval.split": one_of("train", "val", "test"),
    "eval.num_goals": POS_INT,
    "eval.batch_size": POS_INT,
    "eval.curve_every": NONNEG_INT,
    "eval.curve_goals": NONNEG_INT,
    "eval.curve_split": one_of("val", "test"),
    "eval.val_goals": NONNEG_INT,
    "rollout.batch_size": POS_INT,
    "rollout.samples_every": NONNEG_INT,
    "prompt.history": NONNEG_INT,
    "prompt.history_obs_words": NONNEG_INT,
    "prompt.show_admissible": BOOL,
    "prompt.max_obs_words": POS_INT,
    "prompt.think": BOOL,
    "prompt.max_tokens": POS_INT,
    "prompt.chat_template": one_of("auto", True, False),  # rollout/prompts.py render_prompt
    # ----- env (conf/env; each env defines its own subset) -------------------------------------
    "env.name": Lazy(is_env_name, lambda: f"one of {__import__('dreamgym_pl.envs.base', fromlist=['x']).known_envs()}",
                     "nope"),
    "env.max_steps": POS_INT,
    "env.show_instruction": BOOL,
    "env.num_products": POS_INT,
    "env.seed": integer(),
    "env.goals_per_product": POS_INT,
    "env.num_test": nullable(POS_INT),
    "env.num_val": nullable(POS_INT),
    "env.val_seeds": POS_INT,
    "env.num_train": nullable(POS_INT),
    "env.results_per_page": POS_INT,
    "env.max_results": POS_INT,
    "env.products_file": FILE,
    "env.attributes_file": FILE,
    "env.product_ids": one_of("asin", "index"),
    "env.trace": one_of("checklist", "evidence", "tally"),  # WebShop's reasoning.TRACES (test_webshop_env checks)
    "env.train_split": one_of("train", "valid_seen", "valid_unseen"),
    "env.test_split": one_of("train", "valid_seen", "valid_unseen"),
    "env.data_dir": nullable(TEXT),
    "env.tasks": Rule(lambda v: v is None or is_str_list(v), "null or a list of task names", "click-button"),
    "env.train_seeds": POS_INT,
    "env.test_seeds": POS_INT,
    "env.timeout_ms": POS_INT,
    "env.workers": POS_INT,
    "env.slots_per_worker": POS_INT,
    "env.split_file": FILE,
    "env.nb_rooms": POS_INT,
    "env.nb_objects": POS_INT,
    "env.quest_length": POS_INT,
    "env.theme": TEXT,
    "env.intermediate_reward": BOOL,
    "env.cache_dir": nullable(TEXT),
    "env.progress": BOOL,
    # ----- model (conf/model) ------------------------------------------------------------------
    "model.name_or_path": TEXT,
    "model.hidden_size": POS_INT,
    "model.num_layers": POS_INT,
    "model.num_heads": POS_INT,
    "model.intermediate_size": POS_INT,
    "model.max_positions": POS_INT,
    "model.vocab_size": POS_INT,
    "model.dtype": one_of(*DTYPES),
    "model.trust_remote_code": BOOL,
    "model.merge_lora": BOOL,
    "model.lora.enabled": BOOL,
    "model.lora.r": POS_INT,
    "model.lora.alpha": POS,
    "model.lora.dropout": number(0, 1, hi_open=True),
    "model.lora.target_modules": Rule(lambda v: is_str_list(v) and len(v) > 0, "a non-empty list of module names", []),
    # ----- trainer (conf/trainer) --------------------------------------------------------------
    "trainer.accelerator": one_of("cpu", "gpu", "cuda", "auto", "mps", "tpu"),
    "trainer.devices": Rule(is_devices, "an integer > 0 (or -1), 'auto' or a list of device ids", 0),
    "trainer.num_nodes": POS_INT,
    "trainer.strategy": Rule(is_strategy, "a strategy name (auto, ddp, ...) or a mapping with _target_", ""),
    "trainer.strategy._target_": TEXT,
    "trainer.strategy.stage": one_of(1, 2, 3),
    "trainer.strategy.offload_optimizer": BOOL,
    "trainer.strategy.offload_parameters": BOOL,
    "trainer.strategy.logging_batch_size_per_gpu": POS_INT,  # policy/zero.py: DeepSpeed's logging batch size
    "trainer.precision": one_of(*PRECISIONS),
    "trainer.enable_progress_bar": BOOL,
    # ----- engine (conf/engine) ----------------------------------------------------------------
    "engine.name": one_of("hf", "vllm"),
    "engine.micro_batch": POS_INT,
    "engine.cache": one_of("dynamic", "static", "filled"),
    "engine.gpu_memory_utilization": number(0, 1, lo_open=True),
    "engine.train_memory_fraction": number(0, 1, hi_open=True),  # vllm_engine.check_memory_shares
    "engine.enforce_eager": BOOL,
    "engine.max_model_len": POS_INT,
    "engine.dtype": one_of("auto", *DTYPES),
    "engine.sleep_mode": BOOL,
    "engine.lora": one_of("auto", True, False),
    "engine.max_lora_rank": POS_INT,
    "engine.seed": integer(),
}

RULES.update(algo_rules())  # algo.*: declared with their defaults in dreamgym_pl/algo_config.py

def rule_for(key: str) -> Rule | None:
    if key in RULES:
        return RULES[key]
    for pat, rule in RULES.items():
        if "*" in pat and fnmatch.fnmatchcase(key, pat) and key.count(".") == pat.count("."):
            return rule
    return None


def leaf_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    """Dotted names of every leaf of `cfg` (a non-empty mapping is walked into; lists are leaves)."""
    out = []
    for k in cfg.keys():
        node = cfg._get_node(k)
        key = f"{prefix}{k}"
        if isinstance(node, DictConfig) and len(node) > 0 and key != "hydra":
            out += leaf_keys(node, key + ".")
        elif key != "hydra":
            out.append(key)
    return out


def _value(cfg: DictConfig, key: str) -> Any:
    v = OmegaConf.select(cfg, key, throw_on_missing=False)
    return OmegaConf.to_container(v, resolve=True) if isinstance(v, (DictConfig, ListConfig)) else v


def check_keys(cfg: DictConfig, error: type[Exception]) -> None:
    """Every key of `cfg` has a rule and holds an allowed value, else `error("<key>: must be ..., got ...")`; a
    key without a rule (a typo added with `+key=...`, or a new key nobody wrote a rule for) is an error too.
    Mapping keys with a rule (trainer.strategy) are checked as a whole and walked into."""
    keys = leaf_keys(cfg)
    parents = {k.rsplit(".", 1)[0] for k in keys if "." in k}
    for key in keys + sorted(p for p in parents if p in RULES):
        rule = rule_for(key)
        if rule is None:
            raise error(f"{key}: unknown key (no rule in dreamgym_pl/config_keys.py): a typo, or a new key that needs "
                        f"a rule there")
        v = _value(cfg, key)
        if not rule.ok(v):
            raise error(f"{key}: must be {rule.allowed}, got {v!r}")
