"""Per-step policy training samples (prompt -> action tokens) and their collation.

One sample per environment step, as verl-agent: prompt = task + last H (observation, action) pairs +
current observation; response = the action tokens (+ EOS). Scalars (advantage, return, value, group)
ride along per sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from dreamgym_pl.core import Trajectory
from dreamgym_pl.rollout.prompts import PromptConfig, build_prompt, render_prompt


@dataclass
class StepSample:
    prompt_ids: list[int]
    response_ids: list[int]
    traj: int = 0  # index of the trajectory in its batch (DPO pairs, GAE)
    scalars: dict[str, float] = field(default_factory=dict)


def encode_prompt(tokenizer: Any, prompt: str, max_tokens: int) -> list[int]:
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return ids[-max_tokens:]


def encode_action(tokenizer: Any, action: str) -> list[int]:
    return tokenizer(action, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def trajectory_samples(traj: Trajectory, tokenizer: Any, prompt_cfg: PromptConfig, traj_index: int = 0) -> list[StepSample]:
    """Samples of every step; uses the generated token ids when the trajectory came from the policy. Prompts
    keep their last `prompt_cfg.max_tokens` tokens. A policy rollout's prompt (`info["prompt"]`) is the text the
    policy was given, already rendered (`render_prompt`); a prompt built here is rendered the same way."""
    out = []
    history: list[tuple[str, str]] = []
    for tr in traj.transitions:
        prompt = tr.info.get("prompt") or render_prompt(tokenizer, build_prompt(traj.task, history, tr.state, prompt_cfg),
                                                        prompt_cfg.chat_template)
        resp = tr.info.get("response_ids") or encode_action(tokenizer, tr.action)
        out.append(StepSample(encode_prompt(tokenizer, prompt, prompt_cfg.max_tokens), list(resp), traj_index))
        history.append((tr.state.text, tr.action))
    return out


def causal_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor | None:
    """The attention mask to give a causal LM for a batch: None when every row is right-padded (ones, then
    zeros), as `collate` pads. A causal model's real tokens never attend to the padding after them and their
    positions count from 0 either way, so their logits are the same without the mask (padding positions differ;
    every loss masks them), and without a mask SDPA runs its causal kernel instead of a masked one (measured by
    experiments/bench_train_step.py). Any other padding keeps its mask."""
    if attention_mask.shape[1] < 2 or bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all()):
        return None
    return attention_mask


def collate(samples: Sequence[StepSample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch. `loss_mask[b, t]` = 1 where token t+1 is a response token (aligned with
    `token_logprobs`); `prompt_last` = index of the prompt's last token (value head)."""
    seqs = [s.prompt_ids + s.response_ids for s in samples]
    T = max(len(x) for x in seqs)
    B = len(samples)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T - 1), dtype=torch.float32)
    prompt_last = torch.zeros(B, dtype=torch.long)
    for b, (s, x) in enumerate(zip(samples, seqs)):
        ids[b, : len(x)] = torch.tensor(x)
        attn[b, : len(x)] = 1
        p = len(s.prompt_ids)
        loss_mask[b, p - 1: len(x) - 1] = 1.0
        prompt_last[b] = p - 1
    batch = {"input_ids": ids, "attention_mask": attn, "loss_mask": loss_mask, "prompt_last": prompt_last,
             "traj": torch.tensor([s.traj for s in samples], dtype=torch.long)}
    keys = set().union(*(s.scalars.keys() for s in samples)) if samples else set()
    for k in keys:
        batch[k] = torch.tensor([float(s.scalars.get(k, 0.0)) for s in samples], dtype=torch.float32)
    return batch
