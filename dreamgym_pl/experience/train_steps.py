"""A bare AdamW loop for training outside a Lightning fit: the sft stage's copy warm start
(`copying.copy_warmup`) and the experience model's online refresh (`refresh.finetune`). The loss is the experience stage's (token
cross-entropy on the target, prompt masked: `ExperienceModule`)."""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

import torch

from dreamgym_pl.policy import losses, micro
from dreamgym_pl.policy.samples import causal_attention_mask

log = logging.getLogger("dreamgym_pl")


def logits_target_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean negative log-probability, under `logits`, of the batch's target tokens (`collate`'s `loss_mask`)."""
    return -losses.masked_mean(losses.token_logprobs(logits, batch["input_ids"]), batch["loss_mask"])


def target_loss(model: Any, batch: dict[str, torch.Tensor], micro_batches: int = 1) -> torch.Tensor:
    """`logits_target_loss` of `model` on the batch, computed over `micro_batches` length-sorted parts of it
    (`policy/micro.py`: the same loss up to rounding, fewer padded cells)."""

    def part(b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        out = model(input_ids=b["input_ids"], attention_mask=causal_attention_mask(b["attention_mask"]), use_cache=False)
        return logits_target_loss(out.logits, b), {}

    return micro.token_weighted(batch, micro_batches, part)[0]


def adamw_steps(model: Any, batches: Iterator[dict[str, torch.Tensor]], steps: int, lr: float, warmup_steps: int = 0,
                grad_clip: float | None = None, what: str = "training", log_every: int = 0,
                micro_batches: int = 1, precision: Any = "32-true") -> list[float]:
    """`steps` AdamW steps of `model` on the next `steps` batches (moved to the model's device; each step's loss over
    `micro_batches` length-sorted parts: `target_loss`), the learning rate rising linearly over `warmup_steps` then
    constant; returns every step's loss. Each step's forward runs under `precision`'s autocast (a resolved
    trainer.precision: `precision.loop_precision`), the backward and the update outside it. A non-finite loss raises
    FloatingPointError naming `what`. The model's train/eval mode is left as it was."""
    from dreamgym_pl.precision import autocast

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    device = next(model.parameters()).device
    kind = "cuda" if device.type == "cuda" else "cpu"
    was_training = model.training
    model.train()
    out: list[float] = []
    with torch.enable_grad():
        for step in range(1, steps + 1):
            batch = {k: v.to(device) for k, v in next(batches).items()}
            for g in opt.param_groups:
                g["lr"] = lr * min(1.0, step / warmup_steps) if warmup_steps > 0 else lr
            with autocast(precision, kind):
                loss = target_loss(model, batch, micro_batches)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss ({float(loss)}) at step {step} of {what}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            out.append(float(loss.detach()))
            if log_every and step % log_every == 0:
                log.info("%s: step %d/%d, loss %.3f", what, step, steps, sum(out[-log_every:]) / log_every)
    opt.zero_grad(set_to_none=True)
    model.train(was_training)
    return out


def cycle(make: Callable[[], Any]) -> Iterator[Any]:
    """The items of `make()` (e.g. a DataLoader's batches), again and again."""
    while True:
        empty = True
        for x in make():
            empty = False
            yield x
        if empty:
            raise ValueError("cycle: nothing to iterate over")


def shuffled_batches(make_samples: Callable[[], Any], batch_size: int, pad_id: int, seed: int) -> Iterator[Any]:
    """Collated batches of `make_samples()` (called again for every pass), shuffled by one generator seeded with
    `seed`, pass after pass: the data side of `adamw_steps`."""
    from torch.utils.data import DataLoader

    from dreamgym_pl.policy.samples import collate

    gen = torch.Generator().manual_seed(seed)
    return cycle(lambda: DataLoader(make_samples(), batch_size=batch_size, shuffle=True, generator=gen,
                                    collate_fn=lambda b: collate(b, pad_id)))
