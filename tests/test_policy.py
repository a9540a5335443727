"""Policy module behaviour on a tiny model: GRPO moves log-probs the right way; PPO/DPO/SFT steps run."""

import copy

import pytest
import torch

from dreamgym_pl.models import build_tiny_llama, train_word_tokenizer
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.algos import DPO, GRPO, PPO, SFT, GRPOConfig, PPOConfig
from dreamgym_pl.policy.module import PolicyModule
from dreamgym_pl.policy.samples import StepSample, collate


@pytest.fixture(scope="module")
def tiny():
    tok = train_word_tokenizer(["task : buy red shoes observation : search action : click [ a ] click [ b ] search [ x ]"])
    model = build_tiny_llama(tok, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=64)
    return model, tok


def _batch(tok, module, advs, ref=True):
    prompt = tok("task : buy red shoes observation : search action :", add_special_tokens=False)["input_ids"]
    a = tok("click [ a ]", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    b = tok("click [ b ]", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    samples = [StepSample(prompt, a, scalars={"adv": advs[0]}), StepSample(prompt, b, scalars={"adv": advs[1]})]
    batch = collate(samples, tok.pad_token_id)
    batch["old_logp"] = module.logprobs(batch)
    if ref:
        batch["ref_logp"] = module.logprobs(batch, reference=True)
    return batch


def _action_logp(module, batch):
    """log-prob of the token that tells the two actions apart ("a" vs "b"); shared tokens are left out."""
    lp = module.logprobs(batch)
    ids = batch["input_ids"]
    j = int((ids[0] != ids[1]).nonzero()[0])
    return lp[:, j - 1]


def test_collate_masks_prompt_and_padding(tiny):
    model, tok = tiny
    s = [StepSample([5, 6, 7], [8, 2]), StepSample([5, 6], [9, 10, 2])]
    b = collate(s, tok.pad_token_id)
    assert b["input_ids"].shape == (2, 5)
    # sample 0: tokens 8, 2 at positions 3, 4 -> predicted from positions 2, 3
    assert b["loss_mask"][0].tolist() == [0, 0, 1, 1]
    assert b["loss_mask"][1].tolist() == [0, 1, 1, 1]
    assert b["attention_mask"][0].tolist() == [1, 1, 1, 1, 1]
    assert b["prompt_last"].tolist() == [2, 1]


def test_grpo_step_moves_logprobs(tiny):
    model, tok = tiny
    model = copy.deepcopy(model)
    module = PolicyModule(model, tok, GRPO(GRPOConfig(kl_coef=0.01, entropy_coef=0.0)), lr=1e-3)
    batch = _batch(tok, module, [1.0, -1.0])
    before = _action_logp(module, batch)
    opt = module.configure_optimizers()
    module.log_dict = lambda *a, **k: None
    module.log = lambda *a, **k: None
    loss = module.training_step(batch, 0)
    opt.zero_grad()
    loss.backward()
    opt.step()
    after = _action_logp(module, batch)
    assert after[0] > before[0]  # positive advantage: up
    assert after[1] < before[1]  # negative advantage: down


def test_kl_of_identical_policies_zero(tiny):
    model, tok = tiny
    module = PolicyModule(copy.deepcopy(model), tok, GRPO(GRPOConfig(kl_coef=0.1)), lr=1e-3)
    batch = _batch(tok, module, [1.0, -1.0])
    kl = losses.masked_mean(losses.kl_penalty(batch["old_logp"], batch["ref_logp"]), batch["loss_mask"])
    assert kl.item() == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("mode", ["sft", "ppo", "dpo"])
def test_other_modes_step(tiny, mode):
    model, tok = tiny
    objective = {"sft": SFT(), "ppo": PPO(PPOConfig()), "dpo": DPO()}[mode]
    module = PolicyModule(copy.deepcopy(model), tok, objective, lr=1e-3)
    module.log_dict = lambda *a, **k: None
    module.log = lambda *a, **k: None
    batch = _batch(tok, module, [1.0, -1.0], ref=mode != "sft")
    if mode == "ppo":
        batch["old_values"] = module.values(batch)
        batch["returns"] = torch.tensor([1.0, 0.0])
    if mode == "dpo":
        batch["pair"] = torch.tensor([0, 0])
        batch["side"] = torch.tensor([1, 0])
        batch["ref_seq_logp"] = (batch["ref_logp"] * batch["loss_mask"]).sum(-1)
    loss = module.training_step(batch, 0)
    assert torch.isfinite(loss)
    loss.backward()
    if mode == "dpo":
        assert loss.item() == pytest.approx(0.6931, abs=1e-3)  # identical policy and reference: log 2


def test_rl_logprobs_score_the_sampling_temperature(tiny):
    """algo.temperature: old/ref/trained log-probs are those of softmax(logits / T), the distribution rollouts sample
    from; T = 1 leaves them as they were and SFT is never tempered."""
    model, tok = tiny
    b = collate([StepSample([5, 6, 7], [8, 2])], tok.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    ids = b["input_ids"][0]
    for t in (1.0, 0.5):
        module = PolicyModule(copy.deepcopy(model), tok, GRPO(GRPOConfig(temperature=t, kl_coef=0.0)), lr=1e-3)
        lp = module.logprobs(b)[0]
        for pos in range(ids.shape[0] - 1):  # position pos predicts token pos + 1
            want = torch.log_softmax(logits[0, pos] / t, -1)[ids[pos + 1]]
            assert lp[pos].item() == pytest.approx(want.item(), abs=1e-5)
    assert GRPO(GRPOConfig(temperature=0.0)).logit_temperature == 1.0  # greedy rollouts: the plain distribution
    assert SFT().logit_temperature == 1.0
