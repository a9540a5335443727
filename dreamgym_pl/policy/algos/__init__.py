"""Policy objectives as plug-ins, one module each: sft, dpo (offline) and the RL algorithms grpo, ppo.

A new RL algorithm is one module here (a `RLConfig` subclass and a `RLAlgorithm` subclass) added to
`RL_ALGORITHMS`, plus `conf/algo/<name>.yaml`.
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
           "SFT", "rl_algorithm", "stage_algo_config"]


def rl_algorithm(cfg: dict[str, Any]) -> RLAlgorithm:
    """The RL algorithm named by `cfg["name"]` with its config built from `cfg` (the `algo` config)."""
    name = cfg.get("name")
    if name not in RL_ALGORITHMS:
        raise KeyError(f"algo.name: unknown algorithm {name!r}; known: {sorted(RL_ALGORITHMS)}")
    cls = RL_ALGORITHMS[name]
    return cls(cls.config_cls.from_dict(dict(cfg)))


def stage_algo_config(algo: dict[str, Any], overrides: dict[str, Any] | None, stage: str) -> dict[str, Any]:
    """The `algo` config one RL stage uses: `algo` with the stage's `<stage>.algo` overrides put in. An override
    must name an existing key of `algo`, and never `name` (a stage continues its policy with the same algorithm);
    else KeyError naming `<stage>.algo.<key>`."""
    out = dict(algo)
    for key, value in (overrides or {}).items():
        if key == "name":
            raise KeyError(f"{stage}.algo.name: a stage cannot change the algorithm (algo.name={algo.get('name')!r})")
        if key not in algo:
            raise KeyError(f"{stage}.algo.{key}: not a key of algo={algo.get('name')!r} (its keys: "
                           f"{sorted(k for k in algo if k != 'name')})")
        out[key] = value
    return out
