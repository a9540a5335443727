"""PolicyModule: the LightningModule that trains the agent policy with one objective (policy/algos/).

It wires the objective's loss to the model: one forward pass, token log-probs, the objective's loss, logging.
Batches:
- sft:  input_ids, attention_mask, loss_mask
- grpo: + adv [B], old_logp [B, T-1], ref_logp [B, T-1] (when kl_coef > 0)
- ppo:  + adv, returns, old_values [B] (value head on the prompt's last token)
- dpo:  + pair, side [B] (steps of chosen side=1 / rejected side=0 trajectories) and ref_seq_logp [B]
"""

from __future__ import annotations

import copy
import math
import time
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch

from dreamgym_pl.models import add_reference_adapter, is_peft, reference_adapter
from dreamgym_pl.policy import losses, micro
from dreamgym_pl.policy.algos.base import Objective
from dreamgym_pl.policy.samples import causal_attention_mask


class PolicyModule(L.LightningModule):
    def __init__(self, model: Any, tokenizer: Any, objective: Objective, lr: float, weight_decay: float = 0.0,
                 warmup_steps: int = 0, total_steps: int = 0, ref_model: Any | None = None, micro_batches: int = 1):
        super().__init__()
        # length-sorted parts per batch (policy/micro.py) for a token-mean objective (sft, token-mean GRPO): its loss and
        # the old / reference log-probs of its batches, split alike; other objectives take their batches whole
        self.micro_batches = micro_batches if objective.token_mean else 1
        self.model = model.train()
        self.tokenizer = tokenizer
        self.objective = objective
        self.lr = lr
        self.weight_decay = weight_decay
        self.warmup_steps, self.total_steps = warmup_steps, total_steps
        self.ref_model = None
        if objective.needs_reference and is_peft(model):  # LoRA: a frozen copy of the starting adapter
            add_reference_adapter(model, ref_model)
        elif objective.needs_reference:
            self.ref_model = (ref_model if ref_model is not None else copy.deepcopy(model)).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.value_head = None
        if objective.needs_value_head:
            self.value_head = torch.nn.Linear(model.config.hidden_size, 1)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
        self.pending_logs: dict[str, float] = {}  # the RL iteration's logs, logged with the next training step
        self.train_tokens = 0
        self._t0: float | None = None

    # ----- model calls ----------------------------------------------------------------------------
    def _forward(self, model: Any, batch: dict[str, torch.Tensor], hidden: bool = False):
        return model(input_ids=batch["input_ids"], attention_mask=causal_attention_mask(batch["attention_mask"]),
                     output_hidden_states=hidden, use_cache=False)

    @contextmanager
    def _reference(self):
        if self.ref_model is not None:
            yield self.ref_model
        else:
            with reference_adapter(self.model) as m:
                yield m

    def _logprobs(self, logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        t = self.objective.logit_temperature
        return losses.token_logprobs(logits if t == 1.0 else logits / t, input_ids)

    @torch.no_grad()
    def logprobs(self, batch: dict[str, torch.Tensor], reference: bool = False) -> torch.Tensor:
        if reference:
            with self._reference() as m:
                return micro.rowwise(batch, self.micro_batches,
                                     lambda b: self._logprobs(self._forward(m, b).logits, b["input_ids"]))
        return micro.rowwise(batch, self.micro_batches,
                             lambda b: self._logprobs(self._forward(self.model, b).logits, b["input_ids"]))

    def values_from_hidden(self, hidden: torch.Tensor, prompt_last: torch.Tensor) -> torch.Tensor:
        h = hidden[torch.arange(hidden.shape[0], device=hidden.device), prompt_last]
        # the value head outside any autocast, in its own dtype: float32, or bfloat16 where DeepSpeed converted the
        # whole module (its input cast to match, its values returned float32 like the returns they are fit to)
        with torch.autocast(h.device.type, enabled=False):
            return self.value_head(h.to(self.value_head.weight.dtype)).float().squeeze(-1)

    @torch.no_grad()
    def values(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self._forward(self.model, batch, hidden=True)
        return self.values_from_hidden(out.hidden_states[-1], batch["prompt_last"])

    # ----- training -------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self._t0 is None:
            self._t0 = time.perf_counter()
        def part(b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
            out = self._forward(self.model, b, hidden=self.objective.needs_hidden)
            return self.objective.loss(self, b, out, self._logprobs(out.logits, b["input_ids"]))

        loss, logs = micro.token_weighted(batch, self.micro_batches, part)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite {self.objective.name} loss ({float(loss)}) at step {self.global_step}")
        self.train_tokens += int(batch["attention_mask"].sum())
        logs["perf/train_tokens_per_s"] = self.train_tokens / max(time.perf_counter() - self._t0, 1e-9)
        logs.update(self.pending_logs)
        self.pending_logs = {}
        n = batch["input_ids"].shape[0]
        self.log_dict({k: float(v) for k, v in logs.items()}, on_step=True, prog_bar=False, batch_size=n)
        self.log("loss", loss.detach(), prog_bar=True, on_step=True, batch_size=n)
        return loss

    def configure_optimizers(self):
        groups = [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": self.lr,
                   "weight_decay": self.weight_decay}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "lr": self.objective.critic_lr,
                           "weight_decay": 0.0})
        return adamw_with_schedule(groups, self.lr, self.warmup_steps, self.total_steps,
                                   strategy=getattr(self._trainer, "strategy", None))


def adamw_with_schedule(groups: Any, lr: float, warmup: int, total: int, weight_decay: float | None = None,
                        strategy: Any = None):
    """AdamW, with `warmup_cosine` stepped every optimizer step when a warm-up or a total is set. Under a DeepSpeed
    `strategy` that offloads the optimizer (ZeRO-Offload) DeepSpeedCPUAdam in AdamW mode, which DeepSpeed requires
    there (policy/zero.py); its default weight decay set to AdamW's."""
    from dreamgym_pl.policy.zero import optimizer_class

    cls = optimizer_class(strategy)
    if cls is torch.optim.AdamW:
        opt = torch.optim.AdamW(groups, lr=lr) if weight_decay is None else torch.optim.AdamW(groups, lr=lr,
                                                                                              weight_decay=weight_decay)
    else:
        opt = cls(groups, lr=lr, weight_decay=0.01 if weight_decay is None else weight_decay, adamw_mode=True)
    if warmup <= 0 and total <= 0:
        return opt
    return {"optimizer": opt, "lr_scheduler": {"scheduler": warmup_cosine(opt, warmup, total), "interval": "step"}}


def warmup_cosine(opt: torch.optim.Optimizer, warmup: int, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over `warmup` steps, then cosine decay to 0 at `total` (constant if total <= 0)."""

    def f(step: int) -> float:
        w = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
        if total <= 0:
            return w
        return w * 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))

    return torch.optim.lr_scheduler.LambdaLR(opt, f)
