import math

import pytest
import torch

from dreamgym_pl.policy import losses
from dreamgym_pl.policy.micro import rowwise, split_rows, token_weighted
from dreamgym_pl.policy.samples import StepSample, collate


def hand_batch():
    # rows of 3, 1, 4 and 2 tokens; prompts of 2, 1, 2, 1 tokens, so targets of 1, 0, 2, 1 tokens
    samples = [StepSample([5, 6], [7], scalars={"adv": 0.0}), StepSample([5], [], scalars={"adv": 1.0}),
               StepSample([5, 6], [7, 8], scalars={"adv": 2.0}), StepSample([9], [7], scalars={"adv": 3.0})]
    return collate(samples, pad_id=0)


def test_split_rows_sorts_by_length_and_cuts_each_part_to_its_longest_row():
    b = hand_batch()
    b["step"] = torch.tensor(7)  # a scalar rides along whole
    p1, p2 = split_rows(b, 2)
    assert p1["input_ids"].tolist() == [[5, 0], [9, 7]]  # rows 1 (1 token) and 3 (2 tokens)
    assert p1["attention_mask"].tolist() == [[1, 0], [1, 1]]
    assert p1["loss_mask"].tolist() == [[0.0], [1.0]]
    assert p1["adv"].tolist() == [1.0, 3.0] and p1["prompt_last"].tolist() == [0, 0]
    assert p2["input_ids"].tolist() == [[5, 6, 7, 0], [5, 6, 7, 8]]  # rows 0 and 2
    assert p2["loss_mask"].tolist() == [[0.0, 1.0, 0.0], [0.0, 1.0, 1.0]]
    assert p2["adv"].tolist() == [0.0, 2.0] and int(p2["step"]) == 7
    # every target token lands in exactly one part
    assert sum(float(p["loss_mask"].sum()) for p in (p1, p2)) == float(b["loss_mask"].sum()) == 4.0


def test_split_rows_with_more_parts_than_rows_and_one_part():
    b = hand_batch()
    assert [p["input_ids"].shape for p in split_rows(b, 9)] == [(1, 1), (1, 2), (1, 3), (1, 4)]
    (whole,) = split_rows(b, 1)
    assert whole["input_ids"].shape == b["input_ids"].shape
    with pytest.raises(ValueError, match="micro_batches must be >= 1"):
        split_rows(b, 0)


def test_split_rows_refuses_left_padding():
    b = hand_batch()
    b["attention_mask"] = b["attention_mask"].flip(1)
    with pytest.raises(ValueError, match="right-padded"):
        split_rows(b, 2)


class TokenTable(torch.nn.Module):
    """Logits at position t are a learned row of the token at t: a causal model whose rows do not interact."""

    def __init__(self, vocab=10, seed=0):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed)))

    def logprobs(self, b):
        return losses.token_logprobs(self.table[b["input_ids"]], b["input_ids"])


def nll(m):
    def part(b):
        logp = m.logprobs(b)
        return -losses.masked_mean(logp, b["loss_mask"]), {"mean_logp": losses.masked_mean(logp, b["loss_mask"])}
    return part


def test_token_weighted_is_the_batch_token_mean_whatever_the_parts():
    m, b = TokenTable(), hand_batch()
    whole, logs = token_weighted(b, 1, nll(m))
    assert torch.equal(whole, -losses.masked_mean(m.logprobs(b), b["loss_mask"]))  # one part: the same bits
    for parts in (2, 3, 4):
        loss, plogs = token_weighted(b, parts, nll(m))
        assert float(loss) == pytest.approx(float(whole), rel=1e-6)
        assert float(plogs["mean_logp"]) == pytest.approx(float(logs["mean_logp"]), rel=1e-6)
    # the mean of the parts' own means is another number: the weighting by target tokens matters
    part_means = [nll(m)(p)[0] for p in split_rows(b, 2)]
    assert abs(float(sum(part_means)) / 2 - float(whole)) > 1e-3


def test_token_weighted_gradients_match_the_whole_batch():
    m, b = TokenTable(), hand_batch()
    token_weighted(b, 1, nll(m))[0].backward()
    ref = m.table.grad.clone()
    m.table.grad = None
    token_weighted(b, 3, nll(m))[0].backward()
    assert torch.allclose(m.table.grad, ref, rtol=1e-5, atol=1e-7)


def test_rowwise_puts_each_row_back_in_place():
    m, b = TokenTable(), hand_batch()
    whole = m.logprobs(b)
    for parts in (2, 4):
        got = rowwise(b, parts, m.logprobs)
        assert got.shape == whole.shape
        mask = b["loss_mask"].bool()  # every position a loss reads is the whole batch's value
        assert torch.allclose(got[mask], whole[mask])
        real = b["attention_mask"][:, 1:].bool()  # and every real token's
        assert torch.allclose(got[real], whole[real])
    assert torch.equal(rowwise(b, 1, m.logprobs), whole)


def test_target_loss_of_a_tiny_llama_with_micro_batches(tmp_path):
    from dreamgym_pl.experience.train_steps import target_loss
    from dreamgym_pl.models import build_tiny_llama, train_word_tokenizer

    tok = train_word_tokenizer(["search buy now click item red blue shoes size price under dollars"] * 3,
                               vocab_size=64)
    model = build_tiny_llama(tok, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=64)
    g = torch.Generator().manual_seed(1)
    v = len(tok)
    samples = [StepSample(torch.randint(4, v, (n,), generator=g).tolist(),
                          torch.randint(4, v, (k,), generator=g).tolist())
               for n, k in [(9, 2), (3, 1), (15, 4), (5, 3), (7, 1), (2, 2)]]
    b = collate(samples, tok.pad_token_id)
    whole = target_loss(model, b)
    whole.backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    micro = target_loss(model, b, 3)
    micro.backward()
    assert float(micro) == pytest.approx(float(whole), rel=1e-5)
    for p, r in zip(model.parameters(), ref):
        assert torch.allclose(p.grad, r, rtol=1e-4, atol=1e-6)


def test_policy_module_micro_batches_sft():
    from dreamgym_pl.models import build_tiny_llama, train_word_tokenizer
    from dreamgym_pl.policy.algos.grpo import GRPO, GRPOConfig
    from dreamgym_pl.policy.algos.sft import SFT
    from dreamgym_pl.policy.module import PolicyModule

    tok = train_word_tokenizer(["search buy now click item red blue shoes"] * 3, vocab_size=64)
    model = build_tiny_llama(tok, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=64)
    assert GRPO(GRPOConfig()).token_mean and not GRPO(GRPOConfig(agg="seq-mean")).token_mean
    whole, micro = (PolicyModule(model, tok, SFT(), lr=1e-3, micro_batches=n) for n in (1, 4))
    b = collate([StepSample([4, 5, 6, 7, 8], [9]), StepSample([4], [5, 6]), StepSample([7, 8], [4, 5, 6]),
                 StepSample([9, 9, 9], [4])], tok.pad_token_id)
    assert micro.micro_batches == 4
    assert float(micro.training_step(b, 0)) == pytest.approx(float(whole.training_step(b, 0)), rel=1e-5)


def test_policy_module_micro_batches_grpo_loss_logs_and_old_logp():
    from dreamgym_pl.models import build_tiny_llama, train_word_tokenizer
    from dreamgym_pl.policy.algos.grpo import GRPO, GRPOConfig
    from dreamgym_pl.policy.algos.ppo import PPO, PPOConfig
    from dreamgym_pl.policy.module import PolicyModule

    assert not PPO(PPOConfig()).token_mean  # its value loss is a mean over samples
    tok = train_word_tokenizer(["search buy now click item red blue shoes"] * 3, vocab_size=64)
    model = build_tiny_llama(tok, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=64)
    algo = GRPO(GRPOConfig(kl_coef=0.05, entropy_coef=0.01))
    whole, parts = (PolicyModule(model, tok, algo, lr=1e-3, micro_batches=n) for n in (1, 3))
    b = collate([StepSample([4, 5, 6, 7, 8], [9], scalars={"adv": 1.0}),
                 StepSample([4], [5, 6], scalars={"adv": -0.5}),
                 StepSample([7, 8], [4, 5, 6], scalars={"adv": 0.25}),
                 StepSample([9, 9, 9], [4], scalars={"adv": -1.0})], tok.pad_token_id)
    b["old_logp"] = parts.logprobs(b)
    b["ref_logp"] = parts.logprobs(b, reference=True)
    mask = b["loss_mask"].bool()
    assert torch.allclose(b["old_logp"][mask], whole.logprobs(b)[mask], atol=1e-6)
    with torch.no_grad():  # the trained model moves away from the old and reference policies
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    logged = {}
    for name, m in (("whole", whole), ("parts", parts)):
        m.log_dict = lambda d, **kw: logged.setdefault(name, {}).update(d)  # noqa: B023
        m.log = lambda *a, **kw: None
        logged.setdefault(name + "_loss", float(m.training_step(b, 0)))
    assert logged["parts_loss"] == pytest.approx(logged["whole_loss"], rel=1e-5)
    for k in ("losses/policy", "losses/kl", "losses/entropy", "losses/clip_frac"):
        assert logged["parts"][k] == pytest.approx(logged["whole"][k], rel=1e-5, abs=1e-7), k


def test_policy_module_splits_only_token_mean_objectives():
    """PPO (a value loss over samples) and seq-mean GRPO train on whole batches, so their old / reference log-probs
    are computed whole too: no position of a trained row is left at rowwise's 0."""
    from dreamgym_pl.models import build_tiny_llama, train_word_tokenizer
    from dreamgym_pl.policy.algos.grpo import GRPO, GRPOConfig
    from dreamgym_pl.policy.algos.ppo import PPO, PPOConfig
    from dreamgym_pl.policy.module import PolicyModule

    tok = train_word_tokenizer(["search buy now click item red blue shoes"] * 3, vocab_size=64)
    model = build_tiny_llama(tok, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=64)
    for algo, n in ((PPO(PPOConfig()), 1), (GRPO(GRPOConfig(agg="seq-mean")), 1), (GRPO(GRPOConfig()), 4)):
        assert PolicyModule(model, tok, algo, lr=1e-3, micro_batches=4).micro_batches == n


def test_kl_ignores_the_reference_off_the_targets():
    """A reference log-prob of 0 where the trained model gives a padding position -200: k3's exp(200) overflows, and
    without the guard its backward gives NaN gradients although the mask drops the value."""
    from dreamgym_pl.policy.algos.grpo import GRPO, GRPOConfig

    algo = GRPO(GRPOConfig(kl_coef=0.1, entropy_coef=0.0))
    logits = torch.zeros(1, 3, 5, requires_grad=True)
    batch = {"input_ids": torch.tensor([[1, 2, 0]]), "loss_mask": torch.tensor([[1.0, 0.0]]), "adv": torch.tensor([1.0])}
    logp = losses.token_logprobs(logits, batch["input_ids"]) + torch.tensor([[0.0, -200.0]])
    batch["old_logp"] = logp.detach().clone()
    batch["ref_logp"] = torch.tensor([[logp[0, 0].item() - 0.5, 0.0]])
    loss, logs = algo.loss(None, batch, type("Out", (), {"logits": logits})(), logp)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    d = -0.5  # the one target position: k3 = exp(d) - d - 1
    assert float(logs["losses/kl"]) == pytest.approx(math.exp(d) - d - 1, rel=1e-5)
