"""Real environments behind one contract (`Environment`, dreamgym_pl/envs/base.py). The implementations
(webshop, textworld, browser) are imported on demand by `make_vec_env`, never here."""

from dreamgym_pl.envs.base import Environment, SerialVecEnv, VecEnv, known_envs, make_vec_env, register

__all__ = ["Environment", "SerialVecEnv", "VecEnv", "known_envs", "make_vec_env", "register"]
