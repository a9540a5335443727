"""The pieces of the real-model path that need no pipeline: LoRA checkpoints (kept or merged), the device that
generating models are placed on, one left-truncation rule for training and generation, untruncated target
lengths, and the config checks (ZeRO-3 refused, adapter folders accepted)."""

import pytest
import torch

from dreamgym_pl.config import ConfigError, validate
from dreamgym_pl.models import build_tiny_llama, generation_device, load_pretrained, save_model
from tests.conftest import TINY_WORDS as WORDS, compose, save_tiny_checkpoint



@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Llama saved and reloaded, as every model of a run is (an adapter names its base by that path)."""
    return load_pretrained(save_tiny_checkpoint(tmp_path_factory.mktemp("tiny")))


def _lora(model):
    from dreamgym_pl.models import add_lora

    m = add_lora(model, {"r": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]})
    with torch.no_grad():  # a trained adapter: B != 0
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_()
    return m


def test_real_model_generation_device_follows_trainer():
    assert generation_device("cpu", cuda_available=True) == torch.device("cpu")
    assert generation_device("mps", cuda_available=False) == torch.device("mps")
    assert generation_device("gpu", cuda_available=True, local_rank=1) == torch.device("cuda", 1)
    assert generation_device("cuda", cuda_available=True) == torch.device("cuda", 0)
    assert generation_device("auto", cuda_available=True, local_rank=2) == torch.device("cuda", 2)
    assert generation_device("auto", cuda_available=False) == torch.device("cpu")
    with pytest.raises(RuntimeError, match="trainer.accelerator=gpu"):
        generation_device("gpu", cuda_available=False)
    with pytest.raises(ValueError, match="trainer.accelerator"):
        generation_device("tpu", cuda_available=False)


def test_real_model_adapter_kept_reloads_trainable_and_merged_leaves_model_unmerged(tmp_path, tiny):
    import copy

    from peft import PeftModel

    model, tok = tiny
    peft = _lora(copy.deepcopy(model))
    before = {n: p.clone() for n, p in peft.named_parameters()}
    save_model(peft, tok, tmp_path / "ckpt")  # adapter kept
    assert (tmp_path / "ckpt" / "adapter_config.json").exists() and not (tmp_path / "ckpt" / "config.json").exists()
    again, tok2 = load_pretrained(tmp_path / "ckpt")
    assert isinstance(again, PeftModel) and tok2.truncation_side == "left" and tok2.padding_side == "left"
    trainable = {n: p for n, p in again.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert all(torch.equal(p, before[n]) for n, p in again.named_parameters())

    save_model(peft, tok, tmp_path / "ckpt", merge_lora=True)  # the same folder: no adapter file may stay
    assert not (tmp_path / "ckpt" / "adapter_config.json").exists()
    merged, _ = load_pretrained(tmp_path / "ckpt")
    assert type(merged).__name__ == "LlamaForCausalLM" and all(p.requires_grad for p in merged.parameters())
    ids = torch.tensor([tok(WORDS)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, peft(ids).logits, atol=1e-5)  # merged = base + adapter
    assert all(torch.equal(p, before[n]) for n, p in peft.named_parameters())  # the trained model stays unmerged
    fresh, _ = load_pretrained(tmp_path / "ckpt", lora={"enabled": True, "r": 2, "alpha": 4, "dropout": 0.0,
                                                                         "target_modules": ["q_proj"]})
    assert isinstance(fresh, PeftModel)  # merged weights + a fresh adapter when LoRA is on
    unnamed = _lora(build_tiny_llama(tok, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32))
    with pytest.raises(ValueError, match="merge_lora=true"):  # an adapter with no base to reload it from
        save_model(unnamed, tok, tmp_path / "unnamed")


def test_real_model_one_left_truncation_rule(tiny):
    from dreamgym_pl.policy.samples import encode_prompt
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.sampling import SamplingParams
    from dreamgym_pl.rollout.vllm_engine import tail_prompts

    model, tok = tiny
    tok.truncation_side = "right"  # a tokenizer's default; the engine must not follow it
    long, short = "buy tea a b c d e f g h click", "search tea"
    enc = HFEngine(model, tok, max_prompt_tokens=4).encode([long, short])
    assert enc["input_ids"][0].tolist() == encode_prompt(tok, long, 4) == tok(long)["input_ids"][-4:]
    assert enc["input_ids"][1].tolist()[-2:] == tok(short)["input_ids"] and enc["attention_mask"][1].tolist() == [0, 0, 1, 1]
    assert tail_prompts(tok, [long], 4) == [{"prompt_token_ids": encode_prompt(tok, long, 4)}]
    eng = HFEngine(model, tok, max_prompt_tokens=4)
    p = SamplingParams(temperature=0.0, max_new_tokens=3)
    assert eng.generate([long], p)[0].token_ids == eng.generate(["g h click"], p)[0].token_ids  # "g h click" + pad


def test_real_model_engines_use_training_prompt_caps(tmp_path, tiny):
    from dreamgym_pl.stages import Run

    model, tok = tiny
    run = Run(compose(["env=webshop_tiny", "env.num_products=20", "env.num_test=5", "env.num_val=5", "prompt.max_tokens=300",
                       "experience.max_prompt_tokens=200"]), tmp_path)
    assert run.engine_for("policy", model, tok).max_prompt_tokens == 300
    assert run.engine_for("experience", model, tok).max_prompt_tokens == 200
    assert next(model.parameters()).device == generation_device("cpu", torch.cuda.is_available())


def test_real_model_target_lengths_measured_before_the_cut(tiny):
    from dreamgym_pl.core import Observation, Task, Trajectory, Transition
    from dreamgym_pl.experience.format import ExperienceFormat
    from dreamgym_pl.experience.module import experience_samples

    _, tok = tiny
    page = Observation(" ".join(["item page"] * 30), ["click[item]"])
    t = Transition(Task("t", "buy tea"), 0, Observation("search", ["search[...]"]), "search[tea]", page, 0.0, False)
    (s,) = experience_samples([Trajectory(t.task, [t])], tok, ExperienceFormat(max_target_tokens=10), None)
    assert len(s.response_ids) == 11 and s.scalars["target_tokens"] > 60  # cut to 10 + EOS; the report sees > 60


def test_real_model_zero3_refused_with_its_key():
    for over in (["trainer.strategy.stage=3"], ["trainer.strategy=deepspeed_stage_3"]):
        with pytest.raises(ConfigError, match=r"^trainer.strategy.stage: ZeRO-3 is not supported"):
            validate(compose(["trainer=deepspeed", *over]))
    try:
        validate(compose(["trainer=deepspeed"]))  # stage 2 passes this check
    except ConfigError as e:
        assert "ZeRO-3" not in str(e)


def test_real_model_synthetic_rl_accepts_an_adapter_experience_checkpoint(tmp_path, tiny):
    import copy

    model, tok = tiny
    cfg = compose(["stages=[synthetic_rl]"])
    with pytest.raises(ConfigError, match="synthetic_rl needs a trained experience model"):
        validate(cfg, tmp_path)
    save_model(_lora(copy.deepcopy(model)), tok, tmp_path / "checkpoints" / "experience")
    validate(cfg, tmp_path)
