"""Every trainer / model / engine / env preset composes; strategies are constructed on CPU; vLLM is imported only
when asked for and fails with a clear message without it or without a GPU."""

import sys

import pytest
from hydra.utils import instantiate

from dreamgym_pl.config import ConfigError, validate
from tests.conftest import ROOT, compose


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "conf" / "trainer").glob("*.yaml")))
def test_trainer_presets_construct(name):
    cfg = compose([f"trainer={name}"])
    strategy = cfg.trainer.strategy
    if not isinstance(strategy, str):
        obj = instantiate(strategy)
        assert type(obj).__name__ == "DeepSpeedStrategy"
        assert obj.config["zero_optimization"]["stage"] == strategy.stage
    assert cfg.trainer.accelerator in ("cpu", "gpu")


def test_deepspeed_on_cpu_fails_before_work(tmp_path):
    with pytest.raises(ConfigError, match="trainer.accelerator"):
        validate(compose(["trainer=deepspeed", "trainer.accelerator=cpu"]), tmp_path)


@pytest.mark.parametrize("name", ["llama32_3b", "llama31_8b", "qwen25_7b", "hf", "tiny", "tiny_192"])
def test_model_presets_compose(name):
    overrides = [f"model={name}"] + (["model.name_or_path=/models/x"] if name == "hf" else [])
    m = compose(overrides).model
    assert m.name_or_path
    if name == "tiny_192":  # the tiny model at width 192: everything else is model=tiny's
        tiny = compose(["model=tiny"]).model
        assert (m.hidden_size, m.intermediate_size) == (192, 480)
        assert {k: v for k, v in m.items() if k not in ("hidden_size", "intermediate_size")} == \
            {k: v for k, v in tiny.items() if k not in ("hidden_size", "intermediate_size")}
    elif name != "tiny":
        assert m.lora.enabled and m.lora.r > 0 and "q_proj" in m.lora.target_modules and m.dtype == "bfloat16"


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "conf" / "conf").glob("*.yaml")))
def test_run_presets_compose_and_validate(name, tmp_path):
    if name == "webarena_lite_dreamgym":  # seeded from other agents' trajectories: offline_file is required
        with pytest.raises(ConfigError, match="offline_file"):
            validate(compose([f"conf={name}"]), tmp_path)
        return
    validate(compose([f"conf={name}"]), tmp_path)


def test_hf_engine_default_and_vllm_lazy(tmp_path):
    from dreamgym_pl.models import build_tiny_llama, train_word_tokenizer
    from dreamgym_pl.rollout.engine import HFEngine, make_engine

    tok = train_word_tokenizer(["a b c"])
    model = build_tiny_llama(tok, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    assert isinstance(make_engine(compose([]).engine, model, tok), HFEngine)
    assert "vllm" not in sys.modules  # never imported for engine=hf
    with pytest.raises(KeyError, match="engine.name"):
        make_engine({"name": "tgi"}, model, tok)


def test_vllm_without_package_or_gpu_is_a_clear_config_error(tmp_path):
    import torch

    if "vllm" in sys.modules or torch.cuda.is_available():
        pytest.skip("this machine has vLLM/a GPU: the error path does not apply")
    with pytest.raises(ConfigError, match=r"engine.name: engine=vllm needs the `vllm` package and a CUDA GPU"):
        validate(compose(["engine=vllm"]), tmp_path)
