import math

import pytest
import torch

from dreamgym_pl.policy import losses


def test_group_advantages_hand_computed():
    # group a: [1, 0, 0, 1] mean 0.5, unbiased std = sqrt(1/3) = 0.57735
    adv = losses.group_advantages([1, 0, 0, 1, 0.3, 0.3], ["a", "a", "a", "a", "b", "b"], eps=1e-6)
    s = math.sqrt(1 / 3)
    assert adv[:4] == pytest.approx([0.5 / (s + 1e-6), -0.5 / (s + 1e-6), -0.5 / (s + 1e-6), 0.5 / (s + 1e-6)])
    assert adv[4:] == [0.0, 0.0]  # zero variance group


def test_group_of_one_and_no_std():
    assert losses.group_advantages([0.7], ["x"]) == pytest.approx([0.7 / (1 + 1e-6)])
    assert losses.group_advantages([1, 0], ["g", "g"], normalize_std=False) == [0.5, -0.5]


def test_gae_hand_computed():
    # rewards [0, 1], values [0.5, 0.8], gamma 1, lam 0.5
    # t=1: delta = 1 - 0.8 = 0.2 -> A1 = 0.2
    # t=0: delta = 0 + 0.8 - 0.5 = 0.3 -> A0 = 0.3 + 0.5 * 0.2 = 0.4
    adv, ret = losses.gae([0.0, 1.0], [0.5, 0.8], gamma=1.0, lam=0.5)
    assert adv == pytest.approx([0.4, 0.2])
    assert ret == pytest.approx([0.9, 1.0])


def test_clipped_surrogate_values_and_mask():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0]]))  # ratios vs old=0: 1.5, 0.5, 1.0 (last is padding)
    old = torch.zeros(1, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # adv +1: token0 min(1.5, 1.2) -> loss -1.2 ; token1 min(0.5, 0.8) -> -0.5 ; mean = -0.85
    loss, stats = losses.clipped_surrogate(logp, old, torch.tensor([1.0]), mask, 0.2, 0.2, None)
    assert loss.item() == pytest.approx(-0.85)
    assert stats["clip_frac"].item() == pytest.approx(0.5)
    # adv -1: token0 max(1.5, 1.2) -> 1.5 ; token1 max(0.5, 0.8) -> 0.8 ; mean 1.15
    loss, _ = losses.clipped_surrogate(logp, old, torch.tensor([-1.0]), mask, 0.2, 0.2, None)
    assert loss.item() == pytest.approx(1.15)
    # dual clip c=1.2 caps token0's 1.5 at 1.2 -> mean (1.2 + 0.8) / 2 = 1.0
    loss, _ = losses.clipped_surrogate(logp, old, torch.tensor([-1.0]), mask, 0.2, 0.2, 1.2)
    assert loss.item() == pytest.approx(1.0)


def test_asymmetric_clip():
    logp = torch.log(torch.tensor([[1.5]]))
    loss, _ = losses.clipped_surrogate(logp, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1), 0.2, 0.28, None)
    assert loss.item() == pytest.approx(-1.28)


def test_aggregation_modes():
    x = torch.tensor([[1.0, 3.0, 0.0], [2.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert losses.aggregate(x, m, "token-mean").item() == pytest.approx(2.0)  # (1+3+2)/3
    assert losses.aggregate(x, m, "seq-mean").item() == pytest.approx(2.0)  # (2 + 2)/2
    x2 = torch.tensor([[1.0, 5.0], [2.0, 0.0]])
    m2 = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert losses.aggregate(x2, m2, "token-mean").item() == pytest.approx(8 / 3)
    assert losses.aggregate(x2, m2, "seq-mean").item() == pytest.approx((3 + 2) / 2)


def test_kl_identical_is_zero_and_k3_value():
    lp = torch.log(torch.tensor([0.2, 0.5]))
    assert losses.kl_penalty(lp, lp, "k3").abs().max().item() == 0.0
    assert losses.kl_penalty(lp, lp, "k1").abs().max().item() == 0.0
    # ref - logp = log(0.4/0.2) = log 2 -> k3 = 2 - log 2 - 1
    k3 = losses.kl_penalty(torch.log(torch.tensor([0.2])), torch.log(torch.tensor([0.4])), "k3")
    assert k3.item() == pytest.approx(1 - math.log(2))
    big = losses.kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "k3", clamp=10.0)
    assert big.item() == 10.0


def test_value_loss_clipped():
    v, old, ret = torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([0.5])
    # unclipped (1-0.5)^2 = 0.25 ; clipped v = 0.2 -> (0.2-0.5)^2 = 0.09 ; max 0.25 -> 0.125
    assert losses.value_loss(v, old, ret, 0.2).item() == pytest.approx(0.125)
    assert losses.value_loss(torch.tensor([0.1]), old, torch.tensor([1.0]), 0.2).item() == pytest.approx(0.5 * 0.81)


def test_dpo_loss():
    loss, acc = losses.dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]), 0.5)
    # margin = 0.5 * ((1) - (-1)) = 1 -> -log sigmoid(1)
    assert loss.item() == pytest.approx(-math.log(1 / (1 + math.exp(-1))))
    assert acc.item() == 1.0
    l0, _ = losses.dpo_loss(*(torch.zeros(1),) * 4)
    assert l0.item() == pytest.approx(math.log(2))


def test_token_logprobs_alignment():
    logits = torch.zeros(1, 3, 4)
    logits[0, 0, 2] = 10.0  # position 0 predicts token 2 strongly
    lp = losses.token_logprobs(logits, torch.tensor([[1, 2, 3]]))
    assert lp.shape == (1, 2)
    assert lp[0, 0].item() > -0.01 and lp[0, 1].item() == pytest.approx(math.log(0.25))


def test_entropy_uniform():
    assert losses.entropy_from_logits(torch.zeros(1, 4)).item() == pytest.approx(math.log(4))
