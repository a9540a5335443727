"""VLLMEngine: the GenerationEngine for GPU nodes (the `[gpu]` extra), colocated with the trainer.

- Built from the trainer's model: its weights (the base model, for a PEFT policy) and tokenizer are saved
  to a temporary directory that `vllm.LLM` loads; vLLM runs in-process (V1 multiprocessing off), so the
  model runner's `load_weights` is reachable for weight sync.
- `generate`: batched sampling with the sampled tokens' log-probs (`logprobs=0` returns the chosen token's);
  prompts keep their last `max_prompt_tokens` tokens (the left truncation of training and HFEngine).
- `load_weights(model)`: full weights are streamed into the runner's `load_weights`; a PEFT policy with
  `lora: auto` keeps the base weights and ships only the adapter as a new LoRARequest (no merge).
- `sleep_mode`: the engine releases its KV cache (level 1) while the trainer trains, and wakes up before
  the next generate, so trainer and engine share one GPU. Sleeping is process-wide: the engines of one process
  (policy and experience model) share vLLM's one `CuMemAllocator`, whose sleep unmaps every engine's memory, so one
  engine's sleep puts both to sleep and any engine's next call wakes the process (`ProcessSleep`), once.
- Under torchrun (WORLD_SIZE > 1) every rank runs its own in-process engine with the `external_launcher` backend
  (`llm_kwargs`); the engines' memory shares plus the trainer's must fit one GPU (`check_memory_shares`).
- A later stage's policy with the same tokenizer reuses the engine (`adopt`): its weights are pushed, the base
  weights are not saved again.
vLLM is imported only here, only when `engine=vllm` is asked for.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Sequence

import torch

from dreamgym_pl.rollout.sampling import Completion, SamplingParams

VLLM_HELP = ("engine=vllm needs the `vllm` package and a CUDA GPU: pip install -e .[gpu] on a GPU node, "
             "or use engine=hf")


def import_vllm() -> Any:
    """Import vLLM (in-process engine) or fail with what to do."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ImportError as e:
        raise RuntimeError(f"{VLLM_HELP} (import failed: {e})") from e
    if not torch.cuda.is_available():
        raise RuntimeError(f"{VLLM_HELP} (no CUDA device visible)")
    return vllm


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def runner_model(llm: Any) -> Any:
    """The torch module inside an in-process vLLM engine (V0 and V1 layouts)."""
    ex = getattr(llm.llm_engine, "model_executor", None)
    if ex is None:  # V1: LLMEngine -> engine_core (in-process client) -> engine_core -> model_executor
        core = getattr(llm.llm_engine, "engine_core", None)
        core = getattr(core, "engine_core", core)
        ex = getattr(core, "model_executor", None)
    if ex is None:
        raise RuntimeError("cannot reach vLLM's model executor; run with VLLM_ENABLE_V1_MULTIPROCESSING=0")
    w = ex.driver_worker
    w = getattr(w, "worker", w)
    return w.model_runner.model


def tail_prompts(tokenizer: Any, prompts: Sequence[str], max_tokens: int | None) -> list[Any]:
    """vLLM inputs: each prompt as token ids keeping its last `max_tokens` (the left truncation of training and
    HFEngine); plain strings when no bound is set."""
    if not max_tokens:
        return list(prompts)
    ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    return [{"prompt_token_ids": x[-int(max_tokens):]} for x in ids]


def llm_kwargs(path: str, gpu_memory_utilization: float, enforce_eager: bool, max_model_len: int, dtype: str,
               seed: int, sleep_mode: bool, lora: bool, max_lora_rank: int,
               world_size: int | None = None) -> dict[str, Any]:
    """The keyword arguments of `vllm.LLM`: in-process, one GPU per engine; under torchrun (`world_size` > 1, default
    $WORLD_SIZE) the `external_launcher` backend, which joins the ranks' torch.distributed group instead of spawning
    workers, each rank an independent data-parallel replica rolling out its own share."""
    world = int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else int(world_size)
    kw: dict[str, Any] = dict(model=path, gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager,
                              max_model_len=max_model_len, dtype=dtype, seed=seed, enable_sleep_mode=sleep_mode)
    if world > 1:
        kw.update(distributed_executor_backend="external_launcher", tensor_parallel_size=1, data_parallel_size=world)
    if lora:
        kw.update(enable_lora=True, max_lora_rank=max_lora_rank)
    return kw


def check_memory_shares(shares: Sequence[float], train_memory_fraction: float) -> None:
    """Refuse engines whose GPU memory shares (`engine.gpu_memory_utilization` each: the policy's and the experience
    model's engines of one process) leave less than `engine.train_memory_fraction` of the GPU to the trainer."""
    total = float(sum(shares)) + float(train_memory_fraction)
    if total > 1.0 + 1e-9:
        raise ValueError(f"engine.gpu_memory_utilization: {len(shares)} engine(s) x {list(shares)} + "
                         f"engine.train_memory_fraction {train_memory_fraction} = {total:.2f} of the GPU (> 1); lower "
                         f"engine.gpu_memory_utilization (each engine takes its share) or engine.train_memory_fraction")


class ProcessSleep:
    """The sleep state of every vLLM engine in this process. vLLM's sleep mode keeps its allocations in one
    process-wide `CuMemAllocator`: `LLM.sleep()` of one engine unmaps the memory of all of them (and `wake_up()` of one
    maps all of it again; a second `wake_up` would map it twice). So the engine that slept is recorded, and the next
    engine to need the GPU wakes the process through it."""

    sleeper: Any = None  # the engine whose `llm.sleep` put the process to sleep; None while awake

    @classmethod
    def sleep(cls, engine: Any) -> None:
        if cls.sleeper is None:
            engine.llm.sleep(level=1)
            cls.sleeper = engine

    @classmethod
    def wake(cls) -> None:
        if cls.sleeper is not None:
            sleeper, cls.sleeper = cls.sleeper, None
            sleeper.llm.wake_up()

    @classmethod
    def forget(cls, engine: Any) -> None:
        """`engine` is closing: wake the process first if it was the one that slept (its allocator stays)."""
        if cls.sleeper is engine:
            cls.wake()


LIVE: list[Any] = []  # this process's open engines (their memory shares are checked together)


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether two tokenizers encode alike (the same class, vocabulary, special tokens and chat template): a later
    stage's reloaded tokenizer of the same model."""
    if a is b:
        return True
    try:
        return (type(a) is type(b) and a.get_vocab() == b.get_vocab() and a.eos_token_id == b.eos_token_id
                and a.pad_token_id == b.pad_token_id and getattr(a, "chat_template", None) == getattr(b, "chat_template", None))
    except Exception:  # noqa: BLE001 - a tokenizer without these: not the same
        return False


def base_digest(model: Any) -> tuple:
    """A cheap fingerprint of the frozen base weights of a PEFT model (names, shapes and sums of the non-LoRA
    parameters): a later stage whose base changed (merge_lora saved full weights) needs them pushed."""
    out = []
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" not in n and "modules_to_save" not in n:
                out.append((n, tuple(p.shape), float(p.detach().float().sum())))
    return tuple(out)


def full_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """Weights in the HF naming vLLM's loaders expect (PEFT adapters merged in on the fly, not in place)."""
    if _is_peft(model):
        import copy

        merged = copy.deepcopy(model).merge_and_unload()
        return merged.state_dict()
    return model.state_dict()


class VLLMEngine:
    def __init__(self, model: Any, tokenizer: Any, gpu_memory_utilization: float = 0.35, enforce_eager: bool = True,
                 max_model_len: int = 4096, dtype: str = "bfloat16", sleep_mode: bool = True, lora: str | bool = "auto",
                 max_lora_rank: int = 64, seed: int = 0, max_prompt_tokens: int | None = None,
                 train_memory_fraction: float = 0.2, **_: Any):
        check_memory_shares([e.gpu_memory_utilization for e in LIVE] + [gpu_memory_utilization], train_memory_fraction)
        self.vllm = import_vllm()
        self.gpu_memory_utilization = gpu_memory_utilization
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.use_lora = _is_peft(model) and lora not in (False, "false", "off")
        self.sleep_mode = sleep_mode
        self.generated_tokens = 0
        self._dir = tempfile.mkdtemp(prefix="dreamgym_vllm_")
        state = None
        if self.use_lora:  # the base weights alone, in the base's names (the LoRA layers are not saved)
            from dreamgym_pl.models import base_state_dict

            base, state = model.get_base_model(), base_state_dict(model)
        elif _is_peft(model):
            import copy

            base = copy.deepcopy(model).merge_and_unload()  # the trainer's PEFT model stays unmerged
        else:
            base = model
        base.save_pretrained(os.path.join(self._dir, "base"), safe_serialization=True, state_dict=state)
        tokenizer.save_pretrained(os.path.join(self._dir, "base"))
        ProcessSleep.wake()  # a sleeping engine's memory is unmapped: the new one must not profile around it
        self.llm = self.vllm.LLM(**llm_kwargs(os.path.join(self._dir, "base"), gpu_memory_utilization, enforce_eager,
                                              max_model_len, dtype, seed, sleep_mode, self.use_lora, max_lora_rank))
        LIVE.append(self)
        self._lora_req = None
        self._version = 0
        self._base = base_digest(model) if self.use_lora else None
        if self.use_lora:
            self.load_weights(model)

    def adopt(self, model: Any, tokenizer: Any) -> bool:
        """Take on a later stage's policy (`model`, reloaded with `tokenizer`) without a rebuild: False when the
        tokenizer encodes differently (the caller builds a new engine), else its weights are pushed (a LoRA policy
        whose base changed gets the base weights streamed in first) and True."""
        if not same_tokenizer(self.tokenizer, tokenizer) or (self.use_lora and not _is_peft(model)):
            return False
        self.tokenizer = tokenizer
        if self.use_lora:
            digest = base_digest(model)
            if digest != self._base:
                from dreamgym_pl.models import base_state_dict

                self.wake()
                runner_model(self.llm).load_weights(((k, v.detach()) for k, v in base_state_dict(model).items()))
                self._base = digest
        self.load_weights(model)
        return True

    # ----- weights -------------------------------------------------------------------------------
    def load_weights(self, model: Any) -> None:
        self.wake()
        self._version += 1
        if self.use_lora:
            from vllm.lora.request import LoRARequest

            path = os.path.join(self._dir, f"adapter_{self._version}")
            model.save_pretrained(path, selected_adapters=[model.active_adapter])  # not the frozen reference
            self._lora_req = LoRARequest(f"policy_{self._version}", self._version, path)
            old = os.path.join(self._dir, f"adapter_{self._version - 2}")
            shutil.rmtree(old, ignore_errors=True)
            return
        runner_model(self.llm).load_weights(((k, v.detach()) for k, v in full_state_dict(model).items()))
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached KV of the old weights must not be reused

    def sleep(self) -> None:
        """Release the GPU memory of this process's engines (all of them: `ProcessSleep`)."""
        if self.sleep_mode:
            ProcessSleep.sleep(self)

    def wake(self) -> None:
        ProcessSleep.wake()

    # ----- generation ----------------------------------------------------------------------------
    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        self.wake()
        sp = self.vllm.SamplingParams(temperature=max(0.0, params.temperature), top_p=params.top_p,
                                      max_tokens=params.max_new_tokens, stop=list(params.stop) or None,
                                      include_stop_str_in_output=True, logprobs=0)
        inputs = tail_prompts(self.tokenizer, prompts, self.max_prompt_tokens)
        outs = self.llm.generate(inputs, sp, lora_request=self._lora_req, use_tqdm=False)
        res = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [float(step[t].logprob) if step and t in step else 0.0 for step, t in zip(c.logprobs or [], ids)]
            self.generated_tokens += len(ids)
            res.append(Completion(text=c.text, token_ids=ids, logprobs=lps))
        return res

    def close(self) -> None:
        import gc

        ProcessSleep.forget(self)
        if self in LIVE:
            LIVE.remove(self)
        self.llm = None
        gc.collect()
        torch.cuda.empty_cache()
        shutil.rmtree(self._dir, ignore_errors=True)
