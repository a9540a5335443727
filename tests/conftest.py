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

    import dreamgym_pl  # noqa: F401  (registers the algo options: dreamgym_pl/algo_config.py)

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hcompose(config_name="config", overrides=list(overrides))


TINY_WORDS = "a b c d e f g h buy tea click search item page"


def save_tiny_checkpoint(folder):
    """A tiny Llama + word tokenizer saved in `folder` (the HF format every model of a run is saved in)."""
    from dreamgym_pl.models import build_tiny_llama, save_model, train_word_tokenizer

    tok = train_word_tokenizer([TINY_WORDS] * 3)
    save_model(build_tiny_llama(tok, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                                max_positions=64), tok, folder)
    return folder
