"""PolicyModule: the LightningModule that trains the agent policy (sft, grpo, ppo, dpo).

It only wires the pure functions of `losses.py` to the model. Batches come from `data.py`:
- sft:  input_ids, attention_mask, loss_mask
- grpo: + adv [B], old_logp [B, T-1], ref_logp [B, T-1] (when kl_coef > 0)
- ppo:  + adv, returns, old_values [B] (value head on the prompt's last token)
- dpo:  + pair, side [B] (steps of chosen side=1 / rejected side=0 trajectories) and ref_seq_logp [B]
"""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch

from dreamgym_pl.policy import losses


@dataclass
class AlgoConfig:
    """RL hyper-parameters (defaults follow verl-agent's WebShop recipe where it has one)."""

    name: str = "grpo"            # grpo | ppo
    group_size: int = 4           # G rollouts per task (GRPO group)
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = 3.0
    kl_coef: float = 0.01         # k3 KL to the reference policy; 0 disables the reference model
    kl_kind: str = "k3"
    entropy_coef: float = 0.001
    agg: str = "token-mean"
    ppo_epochs: int = 1
    mini_batch_size: int = 64     # per-step samples per optimizer step
    temperature: float = 1.0      # rollout sampling temperature
    top_p: float = 1.0
    max_new_tokens: int = 16
    adv_eps: float = 1e-6
    normalize_std: bool = True
    reward: str = "score"         # score (WebShop's reward) | success (1/0)
    invalid_penalty: float = 0.1  # subtracted per invalid action (verl-agent)
    gamma: float = 1.0            # PPO
    lam: float = 0.95             # PPO GAE lambda
    vf_coef: float = 0.5
    vf_clip: float | None = 0.2
    lr: float = 2.0e-4
    warmup_steps: int = 0         # linear lr warm-up over the first N optimizer steps of an RL stage
    critic_lr: float = 1.0e-3
    grad_clip: float = 1.0


class PolicyModule(L.LightningModule):
    def __init__(self, model: Any, tokenizer: Any, mode: str, lr: float, algo: AlgoConfig | None = None,
                 dpo_beta: float = 0.1, weight_decay: float = 0.0, warmup_steps: int = 0, total_steps: int = 0,
                 ref_model: Any | None = None):
        super().__init__()
        if mode not in ("sft", "grpo", "ppo", "dpo"):
            raise ValueError(f"unknown policy mode {mode!r}")
        self.model = model.train()
        self.tokenizer = tokenizer
        self.mode = mode
        self.lr = lr
        self.algo = algo or AlgoConfig()
        self.dpo_beta = dpo_beta
        self.weight_decay = weight_decay
        self.warmup_steps, self.total_steps = warmup_steps, total_steps
        self.ref_model = None
        if (mode in ("grpo", "ppo") and self.algo.kl_coef > 0) or mode == "dpo":
            if not hasattr(model, "disable_adapter"):  # LoRA: the adapter-disabled base is the reference
                self.ref_model = (ref_model if ref_model is not None else copy.deepcopy(model)).eval()
                for p in self.ref_model.parameters():
                    p.requires_grad_(False)
        self.value_head = None
        if mode == "ppo":
            hidden = model.config.hidden_size
            self.value_head = torch.nn.Linear(hidden, 1)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
        self.pending_logs: dict[str, float] = {}
        self.train_tokens = 0
        self._t0: float | None = None

    # ----- model calls ----------------------------------------------------------------------------
    def _forward(self, model: Any, batch: dict[str, torch.Tensor], hidden: bool = False):
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=hidden,
                    use_cache=False)
        return out

    @contextmanager
    def _reference(self):
        if self.ref_model is not None:
            yield self.ref_model
        else:
            with self.model.disable_adapter():
                yield self.model

    @torch.no_grad()
    def logprobs(self, batch: dict[str, torch.Tensor], reference: bool = False) -> torch.Tensor:
        if reference:
            with self._reference() as m:
                return losses.token_logprobs(self._forward(m, batch).logits, batch["input_ids"])
        return losses.token_logprobs(self._forward(self.model, batch).logits, batch["input_ids"])

    def values_from_hidden(self, hidden: torch.Tensor, prompt_last: torch.Tensor) -> torch.Tensor:
        h = hidden[torch.arange(hidden.shape[0], device=hidden.device), prompt_last]
        return self.value_head(h.float()).squeeze(-1)

    @torch.no_grad()
    def values(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self._forward(self.model, batch, hidden=True)
        return self.values_from_hidden(out.hidden_states[-1], batch["prompt_last"])

    # ----- training -------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self._t0 is None:
            self._t0 = time.perf_counter()
        mask = batch["loss_mask"]
        out = self._forward(self.model, batch, hidden=self.mode == "ppo")
        logp = losses.token_logprobs(out.logits, batch["input_ids"])
        logs: dict[str, torch.Tensor | float] = {}
        if self.mode == "sft":
            loss = -losses.masked_mean(logp, mask)
            logs["losses/sft"] = loss.detach()
        elif self.mode == "dpo":
            seq = (logp * mask).sum(-1)
            n_pairs = int(batch["pair"].max().item()) + 1
            side = batch["side"]
            pair = batch["pair"].long()
            agg = torch.zeros(n_pairs, 2, dtype=seq.dtype, device=seq.device)
            agg = agg.index_put((pair, side.long()), seq, accumulate=True)
            ref = torch.zeros(n_pairs, 2, dtype=seq.dtype, device=seq.device)
            ref = ref.index_put((pair, side.long()), batch["ref_seq_logp"].to(seq.dtype), accumulate=True)
            loss, acc = losses.dpo_loss(agg[:, 1], agg[:, 0], ref[:, 1], ref[:, 0], self.dpo_beta)
            logs["losses/dpo"] = loss.detach()
            logs["dpo/accuracy"] = acc
        else:
            a = self.algo
            pg, stats = losses.clipped_surrogate(logp, batch["old_logp"], batch["adv"], mask, a.clip_low, a.clip_high,
                                                 a.dual_clip, a.agg)
            loss = pg
            logs["losses/policy"] = pg.detach()
            logs["losses/clip_frac"] = stats["clip_frac"]
            if a.entropy_coef > 0:
                ent = losses.masked_mean(losses.entropy_from_logits(out.logits[:, :-1]), mask)
                loss = loss - a.entropy_coef * ent
                logs["losses/entropy"] = ent.detach()
            if a.kl_coef > 0 and "ref_logp" in batch:
                kl = losses.masked_mean(losses.kl_penalty(logp, batch["ref_logp"], a.kl_kind), mask)
                loss = loss + a.kl_coef * kl
                logs["losses/kl"] = kl.detach()
            if self.mode == "ppo":
                v = self.values_from_hidden(out.hidden_states[-1], batch["prompt_last"])
                vl = losses.value_loss(v, batch["old_values"], batch["returns"], a.vf_clip)
                loss = loss + a.vf_coef * vl
                logs["losses/value"] = vl.detach()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite {self.mode} loss ({float(loss)}) at step {self.global_step}")
        self.train_tokens += int(batch["attention_mask"].sum())
        elapsed = time.perf_counter() - self._t0
        logs["perf/train_tokens_per_s"] = self.train_tokens / max(elapsed, 1e-9)
        logs.update(self.pending_logs)
        self.pending_logs = {}
        self.log_dict({k: float(v) for k, v in logs.items()}, on_step=True, prog_bar=False,
                      batch_size=batch["input_ids"].shape[0])
        self.log("loss", loss.detach(), prog_bar=True, on_step=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def configure_optimizers(self):
        groups = [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": self.lr,
                   "weight_decay": self.weight_decay}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "lr": self.algo.critic_lr, "weight_decay": 0.0})
        opt = torch.optim.AdamW(groups, lr=self.lr)
        if self.warmup_steps <= 0 and self.total_steps <= 0:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": warmup_cosine(opt, self.warmup_steps, self.total_steps),
                                                   "interval": "step"}}


def warmup_cosine(opt: torch.optim.Optimizer, warmup: int, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over `warmup` steps, then cosine decay to 0 at `total` (constant if total <= 0)."""
    import math

    def f(step: int) -> float:
        w = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
        if total <= 0:
            return w
        return w * 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))

    return torch.optim.lr_scheduler.LambdaLR(opt, f)
