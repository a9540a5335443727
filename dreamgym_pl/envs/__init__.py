"""Real environments behind one batched protocol (VecEnv)."""

from dreamgym_pl.envs.base import SerialVecEnv, VecEnv, known_envs, make_vec_env

__all__ = ["SerialVecEnv", "VecEnv", "known_envs", "make_vec_env"]
