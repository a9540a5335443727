import pytest

from dreamgym_pl import models

CFG = {"name_or_path": "tiny", "hidden_size": 16, "num_layers": 1, "num_heads": 2, "intermediate_size": 32,
       "max_positions": 64, "vocab_size": 200, "lora": {"enabled": False}}
CORPUS = ["search red tea click buy now", "task : buy tea action : click [ item 1 ]"]


def test_base_model_write_interrupted_then_resumed(tmp_path, monkeypatch):
    """A kill while the tiny base model is written leaves no half folder that the next start would load."""
    real_save = models.save_model

    def dies_midway(model, tok, path, merge_lora=False):
        model.config.save_pretrained(path)  # config.json written, then the process is gone
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(models, "save_model", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        models.get_base_model(CFG, tmp_path, CORPUS)
    assert not (tmp_path / "checkpoints" / "base" / "config.json").exists()
    monkeypatch.setattr(models, "save_model", real_save)
    model, tok = models.get_base_model(CFG, tmp_path, CORPUS)
    again, tok2 = models.get_base_model(CFG, tmp_path, CORPUS)  # now loaded from the folder
    assert tok.get_vocab() == tok2.get_vocab()
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    assert not (tmp_path / "checkpoints" / "base.partial").exists()
