"""The KL/DPO reference of a LoRA policy is the stage's starting policy (base + its starting adapter, a frozen copy),
not the adapter-free base, and stays put while the trained adapter moves; the vLLM LoRA base is the clean base."""

import copy

import pytest
import torch

from dreamgym_pl.models import base_state_dict, load_pretrained, save_model
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.algos.grpo import GRPO, GRPOConfig
from dreamgym_pl.policy.module import PolicyModule
from dreamgym_pl.policy.samples import StepSample, collate
from tests.conftest import save_tiny_checkpoint



@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def _trained_adapter(base, seed):
    """The base (from its folder) with a LoRA adapter whose B is not zero, as after a training stage."""
    model, tok = load_pretrained(base, lora={"enabled": True, "r": 2, "alpha": 4, "dropout": 0.0,
                                                 "target_modules": ["q_proj", "v_proj"]})
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g))
    return model, tok


def _batch(tok):
    ids = tok("buy tea click item page", add_special_tokens=False)["input_ids"]
    return collate([StepSample(ids[:3], ids[3:] + [tok.eos_token_id])], tok.pad_token_id)


def _logp(module, batch, reference=False):
    return module.logprobs(batch, reference=reference)


def test_real_model_reference_is_the_starting_adapter(base):
    model, tok = _trained_adapter(base, 0)
    batch = _batch(tok)
    start = PolicyModule(copy.deepcopy(model), tok, GRPO(GRPOConfig(kl_coef=0.0)), lr=1e-3)
    start_logp = _logp(start, batch)
    with model.disable_adapter(), torch.no_grad():
        base_logp = losses.token_logprobs(model(input_ids=batch["input_ids"]).logits, batch["input_ids"])
    module = PolicyModule(model, tok, GRPO(GRPOConfig(kl_coef=0.1)), lr=1e-3)
    assert torch.allclose(_logp(module, batch, reference=True), start_logp, atol=1e-6)
    assert not torch.allclose(start_logp, base_logp, atol=1e-4)  # the base would be the wrong reference
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".default." in n for n in trainable)  # the copy is frozen, out of the optimizer
    opt = module.configure_optimizers()
    opt = opt["optimizer"] if isinstance(opt, dict) else opt
    assert sum(len(g["params"]) for g in opt.param_groups) == len(trainable)
    with torch.no_grad():  # the trained adapter moves; the reference does not
        for n, p in model.named_parameters():
            if ".default." in n and "lora_B" in n:
                p.add_(1.0)
    assert torch.allclose(_logp(module, batch, reference=True), start_logp, atol=1e-6)
    assert not torch.allclose(_logp(module, batch), start_logp, atol=1e-4)
    assert [n for n, p in model.named_parameters() if p.requires_grad] == trainable  # switching back restored grads


def test_real_model_resumed_reference_comes_from_the_stage_start(base, tmp_path):
    start, tok = _trained_adapter(base, 0)  # the stage's starting policy
    ckpt, _ = _trained_adapter(base, 1)  # its later checkpoint, resumed
    batch = _batch(tok)
    start_logp = _logp(PolicyModule(copy.deepcopy(start), tok, GRPO(GRPOConfig(kl_coef=0.0)), lr=1e-3), batch)
    module = PolicyModule(ckpt, tok, GRPO(GRPOConfig(kl_coef=0.1)), lr=1e-3, ref_model=start)
    assert torch.allclose(_logp(module, batch, reference=True), start_logp, atol=1e-6)
    save_model(ckpt, tok, tmp_path / "ck")  # the checkpoint holds the trained adapter only
    assert not (tmp_path / "ck" / "reference").exists()
    again, _ = load_pretrained(tmp_path / "ck")
    assert list(again.peft_config) == ["default"]


def test_real_model_lora_base_for_vllm_is_the_clean_base(base, tmp_path):
    """What VLLMEngine saves as the base of a LoRA policy (`base.save_pretrained(state_dict=base_state_dict)`)
    reloads as the plain base model."""
    from transformers import AutoModelForCausalLM

    model, _ = _trained_adapter(base, 0)
    plain = AutoModelForCausalLM.from_pretrained(base)
    sd, ref = base_state_dict(model), plain.state_dict()
    assert sd.keys() == ref.keys() and all(torch.equal(sd[k], ref[k]) for k in ref)
    model.get_base_model().save_pretrained(tmp_path / "vllm_base", safe_serialization=True, state_dict=sd)
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "vllm_base").state_dict()
    assert again.keys() == ref.keys() and all(torch.equal(again[k], ref[k]) for k in ref)
