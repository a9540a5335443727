"""The `algo` config group, declared once: each RL algorithm's config dataclass gives every key its default, its
type, its rule (the values `config.validate` allows, `config_rules.py`) and its comment, here and nowhere else.

`register()` stores each dataclass's defaults as the Hydra option `algo=<name>` (ConfigStore: there are no
`conf/algo/*.yaml` files to keep in step), and `rules()` gives `config_keys.RULES` its `algo.*` entries. Importing
`dreamgym_pl` registers them, so every composition (experiments/run.py, tools, tests) sees the same options. The
options are stored as plain mappings, not typed nodes: a wrong value reaches `config.validate`, whose error names the
key, instead of a Hydra type error. Torch-free, so that config checks stay light.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dreamgym_pl.config_rules import (BOOL, NONNEG, NONNEG_INT, POS, POS_INT, PROB, Lazy, Rule, nullable, number,
                                      one_of)


def key(default: Any, rule: Rule) -> Any:
    """A config field: its default and its rule (the comment beside it documents it)."""
    return field(default=default, metadata={"rule": rule})


def _is_name(v: Any) -> bool:
    return v in ALGO_CONFIGS


NAME = Lazy(_is_name, lambda: f"a registered RL algorithm, one of {sorted(ALGO_CONFIGS)}", "a2c")  # algo.name's rule


@dataclass
class RLConfig:
    """Hyper-parameters every RL algorithm shares."""

    name: str = key("", NAME)
    group_size: int = key(8, POS_INT)               # G rollouts per task (verl-agent: 8)
    clip_low: float = key(0.2, number(0, 1, lo_open=True, hi_open=True))  # ratio clip below 1 - clip_low
    clip_high: float = key(0.2, POS)                # ratio clip above 1 + clip_high
    dual_clip: float | None = key(3.0, nullable(number(1, lo_open=True)))  # dual-clip bound c for negative
    #                                                 advantages (null: off)
    kl_coef: float = key(0.01, NONNEG)              # KL to the reference policy (0: no reference model)
    kl_kind: str = key("k3", one_of("k1", "k3"))    # KL estimator: k1 | k3 (low-variance)
    entropy_coef: float = key(0.001, NONNEG)        # entropy bonus
    agg: str = key("token-mean", one_of("token-mean", "seq-mean"))  # loss aggregation
    ppo_epochs: int = key(1, POS_INT)               # passes over each iteration's samples
    mini_batch_size: int = key(64, POS_INT)         # per-step samples per optimizer step
    temperature: float = key(1.0, POS)              # rollout sampling temperature; the loss scores
    #                                                 softmax(logits / temperature) too (verl)
    top_p: float = key(1.0, number(0, 1, lo_open=True))  # rollout nucleus sampling
    max_new_tokens: int = key(16, POS_INT)          # action length bound (tokens); also used by evaluation
    reward: str = key("success", one_of("success", "score"))  # success: 1 iff the episode succeeded (verl-agent's
    #                                                 WebShop reward, scaled); score: the env's graded final reward
    invalid_penalty: float = key(0.1, NONNEG)       # subtracted from the return per invalid action (verl-agent: 0.1)
    lr: float = key(1.0e-4, POS)                    # policy lr for the tiny default; real LLMs need far less
    #                                                 (verl-agent: 1e-6 full, 3e-6 LoRA)
    warmup_steps: int = key(10, NONNEG_INT)         # linear lr warm-up over the first N optimizer steps of an RL
    #                                                 stage (Adam's first steps move every weight by ~lr: a warm-up
    #                                                 keeps a high lr from wrecking the start)
    grad_clip: float | None = key(1.0, nullable(POS))  # gradient-norm clip (null: off)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RLConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise KeyError(f"algo.{unknown[0]}: not a key of algo={d.get('name')!r}; its keys: {sorted(known)}")
        return cls(**d)


@dataclass
class GRPOConfig(RLConfig):
    """GRPO (verl-agent style): the group-normalised episode return on every step of the episode."""

    name: str = key("grpo", NAME)
    adv_eps: float = key(1.0e-6, POS)               # added to the group std
    normalize_std: bool = key(False, BOOL)          # true: divide by the group std (verl-agent); false: subtract
    #                                                 the group mean only (Dr. GRPO: no amplification of tiny score
    #                                                 differences inside a group)


@dataclass
class PPOConfig(RLConfig):
    """PPO: a value head on the prompt's last token, GAE over the steps of an episode, whitened advantages."""

    name: str = key("ppo", NAME)
    group_size: int = key(1, POS_INT)               # no groups: one rollout per task
    gamma: float = key(1.0, PROB)                   # discount
    gae_lambda: float = key(0.95, PROB)             # GAE lambda
    vf_coef: float = key(0.5, NONNEG)               # value-loss weight
    vf_clip: float | None = key(0.2, nullable(POS))  # value clip around the rollout's values (null: off)
    critic_lr: float = key(1.0e-3, POS)             # value head lr


ALGO_CONFIGS: dict[str, type[RLConfig]] = {"grpo": GRPOConfig, "ppo": PPOConfig}


def rules() -> dict[str, Rule]:
    """`algo.<field>` -> its rule, over every algorithm (a field two algorithms share has one rule)."""
    out: dict[str, Rule] = {}
    for cls in ALGO_CONFIGS.values():
        for f in dataclasses.fields(cls):
            out.setdefault(f"algo.{f.name}", f.metadata["rule"])
    return out


def register() -> None:
    """Store each algorithm's defaults as the Hydra config option `algo=<name>`."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for name, cls in ALGO_CONFIGS.items():
        cs.store(group="algo", name=name, node=dataclasses.asdict(cls()))
