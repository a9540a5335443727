"""VLLMEngine: the GenerationEngine for GPU nodes (the `[gpu]` extra), colocated with the trainer.

- Built from the trainer's model: its weights (the base model, for a PEFT policy) and tokenizer are saved
  to a temporary directory that `vllm.LLM` loads; vLLM runs in-process (V1 multiprocessing off), so the
  model runner's `load_weights` is reachable for weight sync.
- `generate`: batched sampling with the sampled tokens' log-probs (`logprobs=0` returns the chosen token's);
  prompts keep their last `max_prompt_tokens` tokens (the left truncation of training and HFEngine).
- `load_weights(model)`: full weights are streamed into the runner's `load_weights`; a PEFT policy with
  `lora: auto` keeps the base weights and ships only the adapter as a new LoRARequest (no merge).
- `sleep_mode`: the engine releases its KV cache (level 1) while the trainer trains, and wakes up before
  the next generate, so trainer and engine share one GPU.
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
                 max_lora_rank: int = 64, seed: int = 0, max_prompt_tokens: int | None = None, **_: Any):
        self.vllm = import_vllm()
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
        kw: dict[str, Any] = dict(model=os.path.join(self._dir, "base"), gpu_memory_utilization=gpu_memory_utilization,
                                  enforce_eager=enforce_eager, max_model_len=max_model_len, dtype=dtype, seed=seed,
                                  enable_sleep_mode=sleep_mode)
        if self.use_lora:
            kw.update(enable_lora=True, max_lora_rank=max_lora_rank)
        self.llm = self.vllm.LLM(**kw)
        self._lora_req = None
        self._version = 0
        self._asleep = False
        if self.use_lora:
            self.load_weights(model)

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
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

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

        self.llm = None
        gc.collect()
        torch.cuda.empty_cache()
        shutil.rmtree(self._dir, ignore_errors=True)
