"""The copy warm start of a model trained from scratch, run by the sft stage (the policy: `sft.copy_steps`): AdamW
steps on copy examples (`experience/copying.py`: the offline text's distinct tokens in random order, repeated
verbatim) before the stage's own data.

A pretrained LLM brings the ability to copy spans of its prompt; a tiny model trained from scratch on a few hundred
trajectories does not learn it and answers with a typical text instead (the policy searched `honey` for a `dark
chocolate` task; README "Results"). The warm start stands in for that part of pretraining: the examples carry no
task, goal or outcome, only the vocabulary that the run's tokenizer already holds."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from dreamgym_pl import dist
from dreamgym_pl.run import atomic_write_json, read_json
from dreamgym_pl.stages.context import Run

log = logging.getLogger("dreamgym_pl")


def copy_pool(tok: Any, trajs: list, sep_text: str) -> tuple[list[int], list[int]]:
    """(the distinct token ids of the trajectories' instructions and states, the ids of `sep_text`)."""
    from dreamgym_pl.experience.copying import token_pool

    texts = [x for tr in trajs for t in tr.transitions for x in (t.task.instruction, t.state.text)]
    pool = token_pool([tok(x, add_special_tokens=False)["input_ids"] for x in texts], tok.all_special_ids)
    return pool, tok(sep_text, add_special_tokens=False)["input_ids"]


def mixed_copy_examples(tok: Any, trajs: list, n: int, max_len: int, sep_text: str, seed: int) -> list:
    """`n` copy examples (lengths uniform in [4, max_len]) to mix into a stage's own data ([] for n <= 0)."""
    from dreamgym_pl.experience.copying import copy_examples

    if n <= 0:
        return []
    pool, sep = copy_pool(tok, trajs, sep_text)
    return copy_examples(pool, n, 4, max_len, sep, tok.eos_token_id, random.Random(seed))


def copy_warm_start(run: Run, stage: str, model: Any, tok: Any, trajs: list, steps: int, batch_size: int, lr: float,
                    max_len: int, sep_text: str, seed: int, warmup_steps: int, grad_clip: float | None
                    ) -> dict[str, float]:
    """`steps` copy steps of `model` before `stage`'s own training -> <stage>/copy_loss (mean of the last 50 steps),
    <stage>/copy_seconds, also kept in checkpoints/<stage>/copy_start.json. A resumed training of the stage with a
    step checkpoint skips them (its weights replace these) and returns the kept numbers."""
    from dreamgym_pl.experience.copying import copy_warmup
    from dreamgym_pl.precision import loop_precision
    from dreamgym_pl.stages.resume import resumes_from_step

    if steps <= 0:
        return {}
    kept = run.dir / "checkpoints" / stage / "copy_start.json"
    if resumes_from_step(run, stage):
        if not kept.exists():
            log.warning("%s: resumed from a step checkpoint without %s (written by an older version): the copy "
                        "warm start's metrics are not reported", stage, kept)
            return {}
        return read_json(kept, f"rerun with resume=false, or delete checkpoints/{stage}/resume (the stage starts over)")
    pool, sep = copy_pool(tok, trajs, sep_text)
    t0 = time.time()
    losses = copy_warmup(model, pool, steps, batch_size, lr, max_len, sep, tok.eos_token_id, tok.pad_token_id, seed,
                         warmup_steps, grad_clip, log_every=250, what=f"{stage}: the copy warm start",
                         micro_batches=run.cfg.micro_batches, precision=loop_precision(run.cfg, model))
    tail = losses[-min(50, len(losses)):]
    res = {f"{stage}/copy_loss": sum(tail) / len(tail), f"{stage}/copy_seconds": time.time() - t0}
    if dist.is_main():
        atomic_write_json(kept, res)
    return res
