"""`causal_attention_mask`: a right-padded batch goes to the causal LM without its mask, and the real tokens'
log-probs are the same as with it."""

import torch

from dreamgym_pl.models import build_tiny_llama, train_word_tokenizer
from dreamgym_pl.policy import losses
from dreamgym_pl.policy.samples import StepSample, causal_attention_mask, collate


def test_right_padding_drops_the_mask_other_padding_keeps_it():
    right = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    assert causal_attention_mask(right) is None
    assert causal_attention_mask(torch.ones(2, 1, dtype=torch.long)) is None
    left = torch.tensor([[0, 1, 1], [1, 1, 1]])
    assert causal_attention_mask(left) is left
    holes = torch.tensor([[1, 0, 1]])
    assert causal_attention_mask(holes) is holes


def test_real_tokens_score_the_same_without_the_mask():
    tok = train_word_tokenizer(["task : buy red shoes observation : search action : click [ a ] search [ x ] b c d"])
    model = build_tiny_llama(tok, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=64).eval()
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    samples = [StepSample(enc("task : buy red shoes observation : search action :"), enc("click [ a ]")),
               StepSample(enc("task : buy"), enc("search [ x ] b c d")),
               StepSample(enc("observation :"), enc("a"))]
    batch = collate(samples, tok.pad_token_id)
    assert batch["attention_mask"].eq(0).any() and causal_attention_mask(batch["attention_mask"]) is None
    with torch.no_grad():
        masked = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        bare = model(input_ids=batch["input_ids"], attention_mask=None).logits
    real = batch["attention_mask"].bool()
    assert torch.allclose(masked[real], bare[real], atol=1e-5)
    lp = lambda logits: losses.masked_mean(losses.token_logprobs(logits, batch["input_ids"]), batch["loss_mask"])  # noqa: E731
    assert torch.allclose(lp(masked), lp(bare), atol=1e-6)
    # the padding positions do differ: the test would catch a model that ignored the mask anyway
    assert not torch.allclose(masked[~real], bare[~real], atol=1e-5)
