"""The built-in, Java-free WebShop (Yao et al. 2022) in text mode."""

from dreamgym_pl.envs.webshop.env import WebShopEngine, WebShopEnv, get_engine, make_webshop, parse_action

__all__ = ["WebShopEngine", "WebShopEnv", "get_engine", "make_webshop", "parse_action"]
