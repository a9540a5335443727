"""The built-in, Java-free WebShop (Yao et al. 2022) in text mode. Everything WebShop-specific lives in this
package: the pages (`env`), the catalogue, search, goals and reward, the scripted agents (`agents`), the
reasoning traces (`reasoning`) and the pipeline's environment (`vec.WebShopVecEnv`, `env.name: webshop`)."""

from dreamgym_pl.envs.webshop.env import WebShopEngine, WebShopEnv, get_engine, parse_action
from dreamgym_pl.envs.webshop.vec import WebShopVecEnv, make_webshop

__all__ = ["WebShopEngine", "WebShopEnv", "WebShopVecEnv", "get_engine", "make_webshop", "parse_action"]
