"""engine.cache=filled (dreamgym_pl/rollout/kv_cache.py): attention reads only the filled positions, and generation
gives what the static and dynamic caches give."""

import pytest
import torch

from test_engine import _tiny_model_and_tokenizer


def _spied_model():
    """The test model, its tokenizer, and the keyword arguments of each of its `generate` calls."""
    model, tok = _tiny_model_and_tokenizer(3.0)
    calls = []
    generate = model.generate

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return generate(*args, **kwargs)

    model.generate = spy
    return model, tok, calls


def test_filled_layer_returns_the_filled_prefix_and_sizes_the_mask_to_it():
    from dreamgym_pl.rollout.kv_cache import FilledLayer

    layer = FilledLayer(max_cache_len=10)
    k = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)  # batch 2, 3 heads, 4 positions
    assert layer.get_mask_sizes(4) == (4, 0)  # asked before the prefill's update
    keys, values = layer.update(k, -k)
    assert keys.shape == (2, 3, 4, 5) and torch.equal(keys, k) and torch.equal(values, -k)
    assert layer.keys.shape == (2, 3, 10, 5)  # allocated once, whole
    one = torch.ones(2, 3, 1, 5)
    assert layer.get_mask_sizes(1) == (5, 0)
    keys, _ = layer.update(one, one)
    assert keys.shape == (2, 3, 5, 5) and torch.equal(keys[:, :, 4:], one) and torch.equal(keys[:, :, :4], k)
    assert keys.data_ptr() == layer.keys.data_ptr()  # a view of the buffer, not a copy
    with pytest.raises(ValueError, match="exceed its 10"):
        layer.update(torch.ones(2, 3, 6, 5), torch.ones(2, 3, 6, 5))
    layer.crop(-2)  # static layers crop by a negative count; both counts follow
    assert layer.filled == 3 == int(layer.cumulative_length) and layer.get_mask_sizes(1) == (4, 0)
    layer.reset()
    assert layer.filled == 0 and layer.get_mask_sizes(2) == (2, 0)


def test_filled_cache_generates_what_the_other_caches_generate():
    """Greedy and sampled (the same seed): the same tokens as static and dynamic on a left-padded batch of prompts of
    different lengths, log-probs equal up to rounding; each call sizes its own cache."""
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.kv_cache import FilledCache
    from dreamgym_pl.rollout.sampling import SamplingParams

    model, tok, calls = _spied_model()
    prompts = ["a b c", "d", "e f g h a b c d e f", "h g"]
    for temperature in (0.0, 1.0):
        params = SamplingParams(temperature=temperature, max_new_tokens=12)
        out = {}
        for cache in ("dynamic", "static", "filled"):
            torch.manual_seed(3)
            out[cache] = HFEngine(model, tok, cache=cache, micro_batch=2).generate(prompts, params)
        lengths = [len(c.token_ids) for c in out["dynamic"]]
        assert (min(lengths) if temperature == 0 else max(lengths)) > 1  # generated past the first token
        for cache in ("static", "filled"):
            assert [c.token_ids for c in out[cache]] == [c.token_ids for c in out["dynamic"]], (cache, temperature)
            for a, b in zip(out[cache], out["dynamic"]):
                assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0.0) < 1e-4
    filled = [kw["past_key_values"] for kw in calls if kw.get("past_key_values") is not None]
    assert len(filled) == 4 and all(isinstance(c, FilledCache) for c in filled)
    # micro-batches of 2: each cache holds its own call's longest prompt + max_new_tokens, filled as far as generated
    assert [c.layers[0].max_cache_len for c in filled[:2]] == [3 + 12, 10 + 12]
    for c in filled:  # generate wrote the prompt and the new tokens through the layers' update
        for layer in c.layers:
            assert layer.max_cache_len - 12 < layer.filled <= layer.max_cache_len
            assert layer.filled == int(layer.cumulative_length)


def test_filled_cache_refuses_sliding_window_models_and_the_engine_falls_back_to_static(caplog):
    from transformers import MistralConfig

    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.kv_cache import FilledCache
    from dreamgym_pl.rollout.sampling import SamplingParams

    model, tok, calls = _spied_model()
    assert FilledCache.supports(model.config)
    sliding = MistralConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=2, sliding_window=4)
    assert not FilledCache.supports(sliding)
    from transformers import Qwen2Config

    qwen = dict(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, sliding_window=4)
    assert FilledCache.supports(Qwen2Config(**qwen, use_sliding_window=False))  # Qwen2.5's configs: full attention
    assert not FilledCache.supports(Qwen2Config(**qwen, use_sliding_window=True, max_window_layers=0))
    with pytest.raises(ValueError, match="other than full attention"):
        FilledCache(sliding, max_cache_len=8)
    engine = HFEngine(model, tok, cache="filled")
    supports = FilledCache.supports
    # the engine's model stands for one that does not qualify (no sliding-window model is generated with here)
    FilledCache.supports = staticmethod(lambda config: False)
    try:
        with caplog.at_level("WARNING", logger="dreamgym_pl"):
            for _ in range(2):
                engine.generate(["a b"], SamplingParams(temperature=0.0, max_new_tokens=2))
    finally:
        FilledCache.supports = supports
    assert [(kw.get("cache_implementation"), kw.get("past_key_values")) for kw in calls] == [("static", None)] * 2
    assert sum("generating with the static cache instead" in r.message for r in caplog.records) == 1


def test_the_default_engine_generates_with_a_filled_cache():
    """conf/engine/hf.yaml's default: every generate call gets its own FilledCache."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from dreamgym_pl.rollout.engine import make_engine
    from dreamgym_pl.rollout.kv_cache import FilledCache
    from dreamgym_pl.rollout.sampling import SamplingParams

    model, tok, calls = _spied_model()
    hf = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "engine" / "hf.yaml")
    engine = make_engine(hf, model, tok, micro_batch=2)
    assert engine.cache == "filled"
    engine.generate(["a b c", "d", "e f g"], SamplingParams(temperature=0.0, max_new_tokens=4))
    caches = [kw.get("past_key_values") for kw in calls]
    assert len(caches) == 2 and all(isinstance(c, FilledCache) for c in caches) and caches[0] is not caches[1]
