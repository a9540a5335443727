"""The vLLM engine's process-level rules, on CPU with fake `vllm.LLM` objects (issue 54): two in-process engines share
one sleep state (vLLM's CuMemAllocator is process-wide), torchrun gets the external_launcher backend, the engines'
memory shares must leave the trainer its share, and a later stage's policy reuses the engine."""

from __future__ import annotations

import types

import pytest

from dreamgym_pl.rollout.sampling import SamplingParams


class Allocator:
    """vLLM's CuMemAllocator as the engines of one process see it: one for all of them."""

    def __init__(self):
        self.mapped = True
        self.calls: list[str] = []


class FakeLLM:
    def __init__(self, name: str, alloc: Allocator):
        self.name, self.alloc = name, alloc

    def sleep(self, level: int = 1):
        self.alloc.calls.append(f"sleep {self.name}")
        self.alloc.mapped = False  # every engine's weights and KV cache, not only this one's

    def wake_up(self):
        self.alloc.calls.append(f"wake {self.name}")
        if self.alloc.mapped:
            raise RuntimeError("wake_up of mapped memory (mapped twice)")
        self.alloc.mapped = True

    def generate(self, inputs, sp, lora_request=None, use_tqdm=False):
        self.alloc.calls.append(f"generate {self.name}")
        if not self.alloc.mapped:
            raise RuntimeError(f"{self.name}: generate on unmapped memory (an illegal memory access on a GPU)")
        out = types.SimpleNamespace(token_ids=[5], text="x]", logprobs=[{5: types.SimpleNamespace(logprob=-0.5)}])
        return [types.SimpleNamespace(outputs=[out]) for _ in inputs]


def _engine(name: str, alloc: Allocator):
    """A VLLMEngine around a fake LLM, without vLLM (its constructor needs vLLM and a GPU)."""
    from dreamgym_pl.rollout.vllm_engine import VLLMEngine

    e = VLLMEngine.__new__(VLLMEngine)
    e.__dict__.update(llm=FakeLLM(name, alloc), sleep_mode=True, _asleep=False, tokenizer=None, max_prompt_tokens=None,
                      _lora_req=None, generated_tokens=0, use_lora=False, gpu_memory_utilization=0.3,
                      vllm=types.SimpleNamespace(SamplingParams=lambda **kw: kw))
    return e


@pytest.fixture(autouse=True)
def _awake():
    from dreamgym_pl.rollout import vllm_engine

    if hasattr(vllm_engine, "ProcessSleep"):
        vllm_engine.ProcessSleep.sleeper = None
    yield
    if hasattr(vllm_engine, "ProcessSleep"):
        vllm_engine.ProcessSleep.sleeper = None


def test_two_engines_sleep_and_wake_together():
    """policy.sleep() unmaps the experience engine too (one allocator): the experience engine's next generate (the
    curriculum's task generation) must wake the process first, once; sleeping twice sleeps once."""
    alloc = Allocator()
    policy, experience = _engine("policy", alloc), _engine("experience", alloc)
    params = SamplingParams(temperature=1.0, max_new_tokens=4)
    policy.sleep()  # the rollouts' end: the trainer trains
    assert experience.generate(["a"], params)[0].token_ids == [5]  # before: generate on unmapped memory
    policy.generate(["b"], params)  # awake already: no second wake_up (before: wake_up of mapped memory)
    assert alloc.calls == ["sleep policy", "wake policy", "generate experience", "generate policy"]
    experience.sleep()
    policy.sleep()  # already asleep: not a second sleep
    policy.generate(["c"], params)
    assert alloc.calls[4:] == ["sleep experience", "wake experience", "generate policy"]


def test_torchrun_uses_the_external_launcher():
    from dreamgym_pl.rollout.vllm_engine import llm_kwargs

    one = llm_kwargs("/m", 0.3, True, 2048, "bfloat16", 0, True, False, 64, world_size=1)
    assert "distributed_executor_backend" not in one and one["enable_sleep_mode"] is True
    four = llm_kwargs("/m", 0.3, True, 2048, "bfloat16", 0, True, True, 16, world_size=4)
    assert four["distributed_executor_backend"] == "external_launcher"
    assert four["tensor_parallel_size"] == 1 and four["data_parallel_size"] == 4
    assert four["enable_lora"] is True and four["max_lora_rank"] == 16


def test_engine_memory_shares_must_leave_the_trainer_room():
    from dreamgym_pl.rollout.vllm_engine import check_memory_shares

    check_memory_shares([0.35, 0.35], 0.2)
    with pytest.raises(ValueError, match="engine.gpu_memory_utilization"):
        check_memory_shares([0.45, 0.45], 0.2)
    with pytest.raises(ValueError, match="train_memory_fraction"):
        check_memory_shares([0.9], 0.2)


def test_engine_is_reused_by_a_later_stage(monkeypatch):
    """A later stage reloads the policy with a new (equal) tokenizer: the vLLM engine adopts the new model (weights
    pushed) instead of being rebuilt, which re-saved the full base weights to a temporary folder each stage."""
    from test_engine import _tiny_model_and_tokenizer

    from conftest import compose
    from dreamgym_pl.rollout import engine as engine_mod
    from dreamgym_pl.rollout.vllm_engine import same_tokenizer
    from dreamgym_pl.stages.context import Run

    built, pushed = [], []

    class FakeVLLM:
        def __init__(self, model, tokenizer, **kw):
            self.tokenizer = tokenizer
            built.append(model)

        def load_weights(self, model):
            pushed.append(model)

        def adopt(self, model, tokenizer):
            if not same_tokenizer(self.tokenizer, tokenizer):
                return False
            self.tokenizer = tokenizer
            self.load_weights(model)
            return True

    monkeypatch.setattr(engine_mod, "make_engine", lambda cfg, model, tok, **kw: FakeVLLM(model, tok))
    run = Run.__new__(Run)
    run.cfg, run._engines = compose(["engine=vllm"]), {}
    m1, t1 = _tiny_model_and_tokenizer()
    m2, t2 = _tiny_model_and_tokenizer()
    assert t1 is not t2 and same_tokenizer(t1, t2)
    e1 = run.engine_for("policy", m1, t1)
    e2 = run.engine_for("policy", m2, t2)
    assert e1 is e2 and built == [m1] and pushed == [m2]
