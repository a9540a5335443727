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


@pytest.fixture
def fake_vllm(monkeypatch):
    """A `vllm` module whose LLM records its keyword arguments and the weights pushed into its runner's model, with
    CUDA reported available: VLLMEngine's own constructor runs on CPU."""
    import sys

    import torch

    from dreamgym_pl.rollout import vllm_engine

    record = types.SimpleNamespace(made=[], pushed=[])

    class LLM:
        def __init__(self, **kw):
            record.made.append(kw)
            model = types.SimpleNamespace(load_weights=lambda items: record.pushed.append(dict(items)))
            runner = types.SimpleNamespace(model_runner=types.SimpleNamespace(model=model))
            self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=runner))

        def reset_prefix_cache(self):
            pass

    mod = types.ModuleType("vllm")
    mod.LLM, mod.SamplingParams = LLM, (lambda **kw: kw)
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    yield record
    for e in list(getattr(vllm_engine, "LIVE", [])):
        e.close()


def test_torchrun_uses_the_external_launcher(fake_vllm, monkeypatch):
    """Under torchrun (WORLD_SIZE > 1) each rank's in-process engine joins the ranks' group with vLLM's
    external_launcher backend, one data-parallel replica per rank; one process keeps the default executor."""
    from dreamgym_pl.rollout.vllm_engine import VLLMEngine
    from test_engine import _tiny_model_and_tokenizer

    model, tok = _tiny_model_and_tokenizer()
    VLLMEngine(model, tok, gpu_memory_utilization=0.3).close()
    assert "distributed_executor_backend" not in fake_vllm.made[-1]
    assert fake_vllm.made[-1]["enable_sleep_mode"] is True
    monkeypatch.setenv("WORLD_SIZE", "4")
    VLLMEngine(model, tok, gpu_memory_utilization=0.3).close()
    kw = fake_vllm.made[-1]
    assert kw["distributed_executor_backend"] == "external_launcher"
    assert kw["tensor_parallel_size"] == 1 and kw["data_parallel_size"] == 4


def test_engine_memory_shares_must_leave_the_trainer_room(fake_vllm):
    """The policy's and the experience model's engines each take engine.gpu_memory_utilization of the GPU: a second
    engine that leaves the trainer less than engine.train_memory_fraction is refused before vLLM starts."""
    from dreamgym_pl.rollout.vllm_engine import VLLMEngine
    from test_engine import _tiny_model_and_tokenizer

    model, tok = _tiny_model_and_tokenizer()
    VLLMEngine(model, tok, gpu_memory_utilization=0.45)
    with pytest.raises(ValueError, match="engine.gpu_memory_utilization"):
        VLLMEngine(model, tok, gpu_memory_utilization=0.45)
    assert len(fake_vllm.made) == 1
    from dreamgym_pl.rollout.vllm_engine import check_memory_shares

    check_memory_shares([0.35, 0.35], 0.2)
    with pytest.raises(ValueError, match="train_memory_fraction"):
        check_memory_shares([0.9], 0.2)


def test_engine_is_reused_by_a_later_stage(fake_vllm):
    """A later stage reloads the policy with a new (equal) tokenizer: the vLLM engine takes the new model's weights
    instead of being rebuilt (which saved the full base weights to a new temporary folder and started vLLM again);
    a tokenizer of another vocabulary still gets a new engine."""
    from conftest import compose
    from dreamgym_pl.stages.context import Run
    from test_engine import _tiny_model_and_tokenizer

    run = Run.__new__(Run)
    run.cfg, run._engines = compose(["engine=vllm"]), {}
    m1, t1 = _tiny_model_and_tokenizer()
    m2, t2 = _tiny_model_and_tokenizer(2.0)
    assert t1 is not t2
    e1 = run.engine_for("policy", m1, t1)
    e2 = run.engine_for("policy", m2, t2)
    assert e1 is e2 and len(fake_vllm.made) == 1
    assert torch_equal(fake_vllm.pushed[-1]["lm_head.weight"], m2.lm_head.weight)
    t3 = _tiny_model_and_tokenizer()[1]
    t3.add_tokens(["zzz"])
    e3 = run.engine_for("policy", m2, t3)
    assert e3 is not e2 and len(fake_vllm.made) == 2


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a.detach(), b.detach()))
