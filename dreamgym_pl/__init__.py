"""dreamgym_pl: reinforcement learning for LLM agents on synthesised experience (DreamGym)."""

__version__ = "0.1.0"

from dreamgym_pl.algo_config import register as _register_algo_options  # noqa: E402

_register_algo_options()  # the Hydra options algo=grpo / algo=ppo, declared as dataclasses (algo_config.py)
