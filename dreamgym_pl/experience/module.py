"""ExperienceModule: SFT of the experience model with the joint loss of the paper's Eq. 5.

Loss = token cross-entropy on the target only (reasoning + next state + actions + reward + done), the
prompt (task, history, retrieved demonstrations, state, action) masked. Validation logs the same token
loss on held-out real transitions; generation-based fidelity (reward/done accuracy, state similarity)
is measured by `judge.py` at the end of the stage.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader

from dreamgym_pl.core import Trajectory, Transition
from dreamgym_pl.experience.format import ExperienceFormat, build_prompt, build_target
from dreamgym_pl.experience.train_steps import target_loss
from dreamgym_pl.policy.batching import shuffled_loader
from dreamgym_pl.policy.module import adamw_with_schedule
from dreamgym_pl.policy.samples import StepSample, collate
from dreamgym_pl.replay.buffer import ReplayBuffer, transition_key


class ExperienceModule(L.LightningModule):
    def __init__(self, model: Any, tokenizer: Any, lr: float = 1e-3, weight_decay: float = 0.0, warmup_steps: int = 0,
                 total_steps: int = 0, micro_batches: int = 1):
        super().__init__()
        self.micro_batches = micro_batches  # length-sorted parts per batch (policy/micro.py)
        self.model = model.train()
        self.warmup_steps, self.total_steps = warmup_steps, total_steps
        self.tokenizer = tokenizer
        self.lr = lr
        self.weight_decay = weight_decay

    def _loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return target_loss(self.model, batch, self.micro_batches)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite experience loss ({float(loss)}) at step {self.global_step}")
        self.log("experience/train_loss", loss, prog_bar=True, on_step=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("experience/val_loss", self._loss(batch), prog_bar=True, on_epoch=True,
                 batch_size=batch["input_ids"].shape[0])

    def configure_optimizers(self):
        return adamw_with_schedule([p for p in self.model.parameters() if p.requires_grad], self.lr, self.warmup_steps,
                                   self.total_steps, weight_decay=self.weight_decay,
                                   strategy=getattr(self._trainer, "strategy", None))  # offload: DeepSpeedCPUAdam


def demos_for(buffer: ReplayBuffer | None, t: Transition, fmt: ExperienceFormat) -> list[Transition]:
    """Top-k real transitions similar to (task, state, action) under the format's exclusion rule: `task` (none of
    the transition's own task: leakage-free), `episode` (none of its own episode; `k + overfetch` are retrieved
    so that k remain) or `none`; synthetic transitions only with `fmt.synthetic_demos`."""
    if buffer is None or fmt.k <= 0:
        return []
    key = transition_key(t.task.instruction, t.state.text, t.action)
    real_only = not fmt.synthetic_demos
    ep = t.info.get("episode")
    if fmt.exclude == "task":
        res = buffer.query([key], fmt.k, real_only=real_only, exclude_tasks=[t.task.task_id])[0]
    elif fmt.exclude == "none":
        res = buffer.query([key], fmt.k, real_only=real_only)[0]
    else:
        res = buffer.query([key], fmt.k + fmt.overfetch, real_only=real_only)[0]
        res = [d for d in res if d is not None and not (ep is not None and d.info.get("episode") == ep)]
    return list(res)[: fmt.k]


def experience_samples(trajs: Sequence[Trajectory], tokenizer: Any, fmt: ExperienceFormat,
                       buffer: ReplayBuffer | None, terminal_repeat: int = 1) -> list[StepSample]:
    """One sample per transition (`terminal_repeat` for an episode's last one: the rare steps that decide the
    reward): prompt (its last `fmt.max_prompt_tokens` tokens) -> target (its first `fmt.max_target_tokens`
    tokens + EOS); `scalars["target_tokens"]`: the target's length before the cut."""
    out = []
    for traj in trajs:
        history: list[tuple[str, str]] = []
        for t in traj.transitions:
            prompt = build_prompt(t.task.instruction, history, demos_for(buffer, t, fmt), t.state,
                                  t.action, fmt)
            target = build_target(t.next_state, t.reward, t.done, t.reasoning, fmt)
            p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"][-fmt.max_prompt_tokens:]
            full = tokenizer(target, add_special_tokens=False)["input_ids"]
            t_ids = full[:fmt.max_target_tokens] + [tokenizer.eos_token_id]
            # the untruncated length (EOS included) is what the length report must see
            sample = StepSample(p_ids, t_ids, scalars={"target_tokens": len(full) + 1})
            out += [sample] * (max(1, terminal_repeat) if t.done else 1)
            history.append((t.state.text, t.action))
    return out


def bounded_trajectories(trajs: Sequence[Trajectory], max_transitions: int, seed: int = 0) -> list[Trajectory]:
    """Whole trajectories drawn in a seeded random order until `max_transitions` transitions are reached (the
    one that crosses the bound is kept), returned in their original order; 0 keeps all. A random order keeps
    every agent of the offline data in proportion: the collection order (oracle episodes first) left the
    experience model 33 failed purchases among 528 (README "Fidelity")."""
    if not max_transitions:
        return list(trajs)
    order = list(range(len(trajs)))
    random.Random(seed).shuffle(order)
    kept, n = set(), 0
    for i in order:
        if n >= max_transitions:
            break
        kept.add(i)
        n += len(trajs[i].transitions)
    return [t for i, t in enumerate(trajs) if i in kept]


def split_by_task(trajs: Sequence[Trajectory], val_fraction: float, seed: int = 0) -> tuple[list[Trajectory], list[Trajectory]]:
    """(train, held-out) trajectories, split by task: every trajectory of a held-out task is held out (a
    share `val_fraction` of the tasks, drawn with `seed`), so no held-out task is seen in training or retrieval.
    Both keep the collection order."""
    tasks = sorted({t.task.task_id for t in trajs})
    random.Random(seed).shuffle(tasks)
    held = set(tasks[: int(len(tasks) * val_fraction)])
    return [t for t in trajs if t.task.task_id not in held], [t for t in trajs if t.task.task_id in held]


def experience_loaders(train_trajs: Sequence[Trajectory], val_trajs: Sequence[Trajectory], tokenizer: Any,
                       fmt: ExperienceFormat, buffer: ReplayBuffer | None, batch_size: int, seed: int = 0,
                       extra: Sequence[StepSample] = (), terminal_repeat: int = 1
                       ) -> tuple[DataLoader, DataLoader | None]:
    """Train (shuffled; + `extra` samples; episode-ending steps `terminal_repeat` times) and validation loaders."""
    train = experience_samples(train_trajs, tokenizer, fmt, buffer, terminal_repeat) + list(extra)
    val = experience_samples(val_trajs, tokenizer, fmt, buffer)
    tl = shuffled_loader(train, batch_size, tokenizer.pad_token_id, torch.Generator().manual_seed(seed))
    coll = lambda b: collate(b, tokenizer.pad_token_id)  # noqa: E731
    vl = DataLoader(val, batch_size=batch_size, shuffle=False, collate_fn=coll) if val else None
    return tl, vl
