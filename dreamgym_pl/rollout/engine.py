"""Generation engines: one interface for HF `generate` (CPU/GPU) and, on GPU nodes, vLLM.

`generate(prompts, params) -> list[Completion]` returns text, generated token ids and their log-probs;
`load_weights(model)` brings the trainer's current weights into the engine (a no-op for HFEngine sharing
the trainer's module; a weight push for engines that hold their own copy).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Sequence

import torch

from dreamgym_pl.rollout.sampling import Completion, GenerationEngine, SamplingParams, cut_at_stop, tokens_through_stop


log = logging.getLogger("dreamgym_pl")

CACHES = ("dynamic", "static", "filled")  # engine.cache (conf/engine/hf.yaml)


class HFEngine:
    """Batched, left-padded `model.generate` with per-token log-probs of the sampled tokens. Prompts keep their
    last `max_prompt_tokens` tokens (left truncation, as in training)."""

    def __init__(self, model: Any, tokenizer: Any, max_prompt_tokens: int = 1024, micro_batch: int = 64,
                 cache: str = "filled"):
        if cache not in CACHES:
            raise ValueError(f"engine.cache: unknown cache {cache!r} ({', '.join(CACHES)})")
        self.model = model
        self.cache = cache
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.micro_batch = micro_batch
        self.generated_tokens = 0
        self._filled_for: Any = None  # the model config whose filled-cache support was last checked
        self._filled: Any = None  # FilledCache where that config qualifies, else None (static; logged once)

    def load_weights(self, model: Any) -> None:
        self.model = model

    @torch.no_grad()
    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        out: list[Completion] = []
        for i in range(0, len(prompts), self.micro_batch):
            out.extend(self._generate(list(prompts[i:i + self.micro_batch]), params))
        return out

    def encode(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        """Left-padded ids of `prompts`, each keeping its last `max_prompt_tokens` tokens: the rule of training
        (`policy.samples.encode_prompt`), so a long prompt loses its head and keeps the current step."""
        tok = self.tokenizer
        tok.padding_side = "left"
        tok.truncation_side = "left"
        return tok(prompts, return_tensors="pt", padding=True, truncation=True, max_length=self.max_prompt_tokens,
                   add_special_tokens=False)

    def _generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        tok, model = self.tokenizer, self.model
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        enc = {k: v.to(device) for k, v in self.encode(prompts).items()}
        greedy = params.temperature <= 0
        eos_ids = eos_token_ids(model, tok)
        # the chosen tokens' log-probs step by step (ChosenLogprobs), not generate's output_scores: those keep every
        # step's batch x vocab scores until the end (~7.5 GB in float32 for 64 prompts x 128 tokens x 152k vocab)
        recorder = ChosenLogprobs()
        gen_kwargs: dict[str, Any] = dict(max_new_tokens=params.max_new_tokens, do_sample=not greedy,
                                          pad_token_id=tok.pad_token_id,
                                          eos_token_id=eos_ids[0] if len(eos_ids) == 1 else eos_ids,
                                          return_dict_in_generate=True)
        cache, filled = self.cache, None
        if cache == "filled":
            if self._filled_for is not model.config:  # asked once per model config, not per call
                self._filled_for, self._filled = model.config, filled_cache_class(model.config)
                if self._filled is None:
                    import transformers

                    log.warning("engine.cache=filled: %s with transformers %s does not qualify (a layer other than "
                                "full attention, or an older cache API); generating with the static cache instead",
                                type(model).__name__, transformers.__version__)
            filled = self._filled
            if filled is None:
                cache = "static"
        if cache == "static":  # written in place: a dynamic cache copies itself whole for every new token
            # no automatic torch.compile (transformers compiles a static cache's forward on GPUs): measured on CPU only
            gen_kwargs.update(cache_implementation="static", disable_compile=True)
        elif cache == "filled":  # in place, sized for this call, attention over the filled positions only
            size = enc["input_ids"].shape[1] + params.max_new_tokens
            gen_kwargs.update(past_key_values=filled(model.config, max_cache_len=size), disable_compile=True)
        from transformers import LogitsProcessorList

        procs = LogitsProcessorList()
        if not greedy:  # generate's own warpers, in its order, ahead of the recorder: it sees what sampling sees
            from transformers import TemperatureLogitsWarper, TopPLogitsWarper

            if params.temperature != 1.0:
                procs.append(TemperatureLogitsWarper(params.temperature))
            if params.top_p < 1.0:
                procs.append(TopPLogitsWarper(top_p=params.top_p, min_tokens_to_keep=1))
            gen_kwargs.update(temperature=1.0, top_p=1.0, top_k=0)  # (so generate adds no warpers of its own)
        procs.append(recorder)
        gen_kwargs["logits_processor"] = procs
        with warnings.catch_warnings():  # transformers 5.2x renames generate's past_key_values to cache
            warnings.filterwarnings("ignore", message=".*past_key_values.* is deprecated", category=FutureWarning)
            res = model.generate(**enc, **gen_kwargs)
        seqs = res.sequences[:, enc["input_ids"].shape[1]:]
        # log-probs of the chosen tokens under the sampling distribution: the scores after generate's processors
        # (temperature, top-p); dividing by the temperature again scored them at T^2
        logp = recorder.finish(seqs)
        if was_training:
            model.train()
        outs = []
        pad = tok.pad_token_id  # read once: each read is a vocabulary lookup in transformers
        eos_set = set(eos_ids)

        def dec(x: list[int]) -> str:
            return tok.decode([t for t in x if t not in eos_set], skip_special_tokens=True)

        for row, lp in zip(seqs.tolist(), logp.tolist()):
            ids, lps = [], []
            for t, l in zip(row, lp):
                if t == pad and pad not in eos_set:
                    break
                ids.append(t)
                lps.append(l)
                if t in eos_set:
                    break
            self.generated_tokens += len(ids)  # all tokens generated, including those past the stop
            if params.stop:  # generation ran on past the stop string: keep the tokens that made the text
                n = tokens_through_stop(ids, dec, params.stop)
                ids, lps = ids[:n], lps[:n]
            text = dec(ids)
            if params.stop:
                text, _ = cut_at_stop(text, params.stop)
            outs.append(Completion(text=text, token_ids=ids, logprobs=lps))
        return outs


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The tokens that end a generation: the tokenizer's EOS first, then those of the model's generation config
    (an int or a list: e.g. Llama 3 Instruct ends a turn with <|eot_id|> as well as <|end_of_text|>); passing the
    tokenizer's alone to generate would override the config's list."""
    ids: list[int] = []
    gc = getattr(model, "generation_config", None)
    cfg_eos = getattr(gc, "eos_token_id", None)
    for t in [tokenizer.eos_token_id, *(cfg_eos if isinstance(cfg_eos, (list, tuple)) else [cfg_eos])]:
        if t is not None and int(t) not in ids:
            ids.append(int(t))
    return ids


class ChosenLogprobs:
    """A logits processor, last in generate's list, that keeps the log-softmax of one step's processed scores
    (batch x vocab) until the next step shows the token chosen from it (the last column of `input_ids`), then keeps
    only that token's log-prob: one step's scores alive at a time, instead of output_scores' every step.
    `finish(generated)` adds the last step's and returns batch x steps."""

    def __init__(self) -> None:
        self._prev: torch.Tensor | None = None
        self._chosen: list[torch.Tensor] = []

    def _take(self, tokens: torch.Tensor) -> None:
        if self._prev is not None:
            self._chosen.append(self._prev.gather(-1, tokens.to(self._prev.device).unsqueeze(-1)).squeeze(-1))
            self._prev = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._take(input_ids[:, -1])
        self._prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, generated: torch.Tensor) -> torch.Tensor:
        if generated.shape[1] > len(self._chosen):
            self._take(generated[:, len(self._chosen)])
        if not self._chosen:
            return torch.zeros(generated.shape[0], 0)
        return torch.stack(self._chosen, dim=1)


def filled_cache_class(config: Any) -> Any:
    """`FilledCache` when the installed transformers and `config` support it, else None (imported here: older
    transformers lack the layered caches it builds on)."""
    try:
        from dreamgym_pl.rollout.kv_cache import FilledCache
    except ImportError:
        return None
    return FilledCache if FilledCache.supports(config) else None


def make_engine(cfg: Any, model: Any, tokenizer: Any, **overrides: Any) -> GenerationEngine:
    """The engine named by `cfg` (a string or the `engine` config: name + its keyword arguments)."""
    if isinstance(cfg, str):
        name, kwargs = cfg, {}
    else:
        kwargs = {k: v for k, v in dict(cfg).items() if k != "name"}
        name = dict(cfg).get("name", "hf")
    kwargs.update(overrides)
    if name == "hf":
        return HFEngine(model, tokenizer, **{k: v for k, v in kwargs.items() if k in ("max_prompt_tokens", "micro_batch", "cache")})
    if name == "vllm":
        from dreamgym_pl.rollout.vllm_engine import VLLMEngine  # imported only when asked for

        return VLLMEngine(model, tokenizer, **kwargs)
    raise KeyError(f"engine.name: unknown engine {name!r} (hf, vllm)")
