"""dreamgym_pl: reinforcement learning for LLM agents on synthesised experience (DreamGym)."""

__version__ = "0.1.0"
