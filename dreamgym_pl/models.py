"""One place that builds or loads causal LMs and their tokenizers.

`model.name_or_path: tiny` (the embedded default) trains a whole-word tokenizer with `tokenizers` on the
environment's text and builds a Llama of a few million parameters from a `LlamaConfig`; both are saved
with `save_pretrained` and reloaded with `from_pretrained`. Any other `name_or_path` is loaded with
`from_pretrained` (safetensors only; `trust_remote_code` only when the config turns it on), optionally
wrapped with a LoRA adapter through peft.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

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


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_model(model: Any, tokenizer: Any, path: str | Path) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)


def load_pretrained(path: str | Path, dtype: str = "float32", trust_remote_code: bool = False,
                    lora: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """Load a causal LM + tokenizer with safetensors; wrap with LoRA if `lora.enabled`."""
    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype), use_safetensors=True,
                                                 trust_remote_code=trust_remote_code)
    if lora and lora.get("enabled"):
        model = add_lora(model, lora)
    return model, tokenizer


def add_lora(model: Any, lora: dict[str, Any]) -> Any:
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=int(lora.get("r", 16)), lora_alpha=int(lora.get("alpha", 32)),
                     lora_dropout=float(lora.get("dropout", 0.0)),
                     target_modules=list(lora.get("target_modules", ["q_proj", "k_proj", "v_proj", "o_proj"])),
                     task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def get_base_model(model_cfg: dict[str, Any], run_dir: Path, corpus: Iterable[str] | None, seed: int = 0,
                   atomic_words: Sequence[str] = ()) -> tuple[Any, Any]:
    """The initial (pre-SFT) model of a run.

    tiny: tokenizer trained on `corpus` (keeping `atomic_words` whole) and a fresh Llama, cached in
    <run dir>/checkpoints/base;
    otherwise `from_pretrained(name_or_path)` (+ LoRA when `model.lora.enabled`)."""
    name = model_cfg["name_or_path"]
    if name != "tiny":  # real models load from their own path; nothing is copied into the run dir
        return load_pretrained(name, model_cfg.get("dtype", "bfloat16"), bool(model_cfg.get("trust_remote_code", False)),
                               lora=model_cfg.get("lora"))
    base = Path(run_dir) / "checkpoints" / "base"
    if (base / "config.json").exists():
        return load_pretrained(base, "float32")
    if corpus is None:
        raise ValueError("model.name_or_path=tiny needs a text corpus to train its tokenizer")
    tok = train_word_tokenizer(corpus, int(model_cfg.get("vocab_size", 8000)), atomic_words)
    model = build_tiny_llama(tok, int(model_cfg["hidden_size"]), int(model_cfg["num_layers"]),
                             int(model_cfg["num_heads"]), int(model_cfg["intermediate_size"]),
                             int(model_cfg["max_positions"]), seed)
    save_model(model, tok, base)
    return load_pretrained(base, "float32")
