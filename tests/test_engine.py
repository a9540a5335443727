"""Generation engine helpers: the trained response tokens are exactly those that produced the action."""

from dreamgym_pl.rollout.sampling import cut_at_stop, tokens_through_stop

PIECES = ["click", "[", "item", " 1", "]", "<eos>", "junk"]


def _decode(ids):
    return "".join(PIECES[i] for i in ids if PIECES[i] != "<eos>")


def test_cut_at_stop_earliest_end():
    assert cut_at_stop("click[a] x]", ["]"]) == ("click[a]", True)
    assert cut_at_stop("search[x", ["]"]) == ("search[x", False)
    # of two stop strings, the one that ends first wins
    assert cut_at_stop("ab</s>cd]", ["]", "</s>"]) == ("ab</s>", True)


def test_tokens_through_stop():
    # "click" "[" "item" " 1" "]" -> the 5th token completes the stop string
    assert tokens_through_stop([0, 1, 2, 3, 4, 6, 6], _decode, ["]"]) == 5
    assert tokens_through_stop([0, 1, 2, 3, 4, 5], _decode, ["]"]) == 5  # the EOS after "]" is dropped too
    assert tokens_through_stop([0, 1, 2, 6], _decode, ["]"]) == 4  # no stop: everything is kept
    assert tokens_through_stop([0, 1, 2, 6], _decode, []) == 4
    assert tokens_through_stop([4], _decode, ["]"]) == 1


def _tiny_model_and_tokenizer(scale: float = 1.0):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    wl = Tokenizer(models.WordLevel(unk_token="<unk>"))
    wl.pre_tokenizer = pre_tokenizers.Whitespace()
    wl.train_from_iterator(["a b c d e f g h"], trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<eos>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=wl, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, pad_token_id=0, eos_token_id=2))
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model, tok


def test_hf_engine_logprobs_are_the_sampling_distributions():
    """A sampled token's log-prob is log softmax(logits / T) of that token (generate's scores are already tempered:
    they were once divided by T a second time), and greedy's is log softmax(logits)."""
    import torch

    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.sampling import SamplingParams

    model, tok = _tiny_model_and_tokenizer(10.0)  # peaked logits: T and T^2 give clearly different log-probs
    ids = tok("a b c", add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits[0, -1]
    engine = HFEngine(model, tok)
    for temperature in (0.5, 0.0):
        c = engine.generate(["a b c"], SamplingParams(temperature=temperature, max_new_tokens=1))[0]
        expected = torch.log_softmax(logits / (temperature or 1.0), -1)[c.token_ids[0]].item()
        assert abs(c.logprobs[0] - expected) < 1e-4, (temperature, c.logprobs[0], expected)


def test_hf_engine_static_cache_generates_what_the_dynamic_one_does():
    """engine.cache=static: the same greedy tokens and log-probs as the dynamic cache, on a left-padded batch of
    prompts of different lengths (micro-batches of 2: a long batch, then a short one, on one model); an unknown
    cache is refused, naming the key. The default (filled): tests/test_kv_cache.py."""
    import pytest

    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.sampling import SamplingParams

    model, tok = _tiny_model_and_tokenizer(3.0)
    asked = []
    generate = model.generate

    def spy(*args, **kwargs):  # which cache each call asked for
        asked.append(kwargs.get("cache_implementation"))
        return generate(*args, **kwargs)

    model.generate = spy
    prompts = ["a b c", "d", "e f g h a b c d e f", "h g"]
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    dyn = HFEngine(model, tok, cache="dynamic").generate(prompts, params)
    assert asked == [None]
    engine = HFEngine(model, tok, cache="static", micro_batch=2)
    sta = engine.generate([prompts[2], prompts[0], prompts[1], prompts[3]], params)
    sta = [sta[1], sta[2], sta[0], sta[3]]
    assert asked[1:] == ["static", "static"]
    assert [c.token_ids for c in dyn] == [c.token_ids for c in sta]
    assert all(len(c.token_ids) > 1 for c in dyn)  # something was generated past the first token
    for a, b in zip(dyn, sta):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4
    with pytest.raises(ValueError, match="engine.cache"):
        HFEngine(model, tok, cache="paged")
