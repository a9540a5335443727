import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def shop():
    from dreamgym_pl.envs.webshop import get_engine

    return get_engine(num_products=200, seed=0, goals_per_product=2, num_test=100, results_per_page=10)


def compose(overrides=()):
    from hydra import compose as hcompose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hcompose(config_name="config", overrides=list(overrides))
