"""Policy objectives as plug-ins, one module each: sft, dpo (offline) and the RL algorithms grpo, ppo.

A new RL algorithm is one module here (a `RLAlgorithm` subclass) added to `RL_ALGORITHMS`, and its config
dataclass (a `RLConfig` subclass: defaults, rules, comments) in `dreamgym_pl/algo_config.py`'s `ALGO_CONFIGS`, which
makes it the Hydra option `algo=<name>`.
"""

from __future__ import annotations

from typing import Any

from dreamgym_pl.policy.algos.base import Objective, RLAlgorithm, RLConfig
from dreamgym_pl.policy.algos.dpo import DPO
from dreamgym_pl.policy.algos.grpo import GRPO, GRPOConfig
from dreamgym_pl.policy.algos.ppo import PPO, PPOConfig
from dreamgym_pl.policy.algos.sft import SFT

RL_ALGORITHMS: dict[str, type[RLAlgorithm]] = {"grpo": GRPO, "ppo": PPO}

__all__ = ["DPO", "GRPO", "GRPOConfig", "Objective", "PPO", "PPOConfig", "RLAlgorithm", "RLConfig", "RL_ALGORITHMS",
           "SFT", "rl_algorithm"]


def rl_algorithm(cfg: dict[str, Any]) -> RLAlgorithm:
    """The RL algorithm named by `cfg["name"]` with its config built from `cfg` (the `algo` config)."""
    name = cfg.get("name")
    if name not in RL_ALGORITHMS:
        raise KeyError(f"algo.name: unknown algorithm {name!r}; known: {sorted(RL_ALGORITHMS)}")
    cls = RL_ALGORITHMS[name]
    return cls(cls.config_cls.from_dict(dict(cfg)))
