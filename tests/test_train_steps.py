import math

import pytest
import torch

from dreamgym_pl.experience.train_steps import adamw_steps, cycle, target_loss


class Uniform(torch.nn.Module):
    """Logits of zeros over a vocabulary of 4 plus one trainable bias: every token has probability 1/4 at first."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(4))

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        return type("Out", (), {"logits": self.bias.expand(*input_ids.shape, 4)})()


def batch():
    ids = torch.tensor([[1, 2, 3]])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": torch.tensor([[0.0, 1.0]])}


def test_target_loss_of_a_uniform_model_is_log_vocab():
    assert float(target_loss(Uniform(), batch())) == pytest.approx(math.log(4))


def test_adamw_steps_lowers_the_loss_and_keeps_the_mode():
    m = Uniform().eval()
    out = adamw_steps(m, iter([batch()] * 5), 5, lr=0.1, warmup_steps=2, grad_clip=1.0)
    assert len(out) == 5 and out[0] == pytest.approx(math.log(4)) and out[-1] < out[0]
    assert not m.training
    assert int(m.bias.argmax()) == 3  # the target token's logit rose


def test_adamw_steps_names_a_non_finite_loss():
    m = Uniform()
    with torch.no_grad():
        m.bias.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="step 1 of the copy warm-up"):
        adamw_steps(m, iter([batch()]), 1, lr=0.1, what="the copy warm-up")


def test_cycle_repeats_and_refuses_nothing():
    it = cycle(lambda: [1, 2])
    assert [next(it) for _ in range(5)] == [1, 2, 1, 2, 1]
    with pytest.raises(ValueError, match="nothing"):
        next(cycle(lambda: []))
