"""Resume inside sft and dpo: a run that crashes right after a step checkpoint and resumes ends with the very
weights of an uninterrupted run (the resumed loader skips exactly the batches already trained on, and the
optimizer, lr schedule and DPO reference are the uninterrupted run's)."""

import lightning as L
import pytest
import torch

from dreamgym_pl.pipeline import run_pipeline
from tests.conftest import compose
from tests.test_pipeline import TINY

ARGS = ["conf=webshop_dpo", *TINY, "sft.max_steps=6", "dpo.batch_size=2", "dpo.max_pairs=8", "checkpoint_steps=2",
        "stages=[collect,sft,dpo]"]


class Crashed(RuntimeError):
    pass


class Crash(L.Callback):
    """Raises after optimizer step `at` of `stage` (after the stage's own callbacks saved their checkpoint)."""

    def __init__(self, stage, at):
        self.stage, self.at = stage, at

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.logger.name == self.stage and trainer.global_step == self.at:
            raise Crashed(f"crash in {self.stage} at step {self.at}")


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.mark.parametrize("stage,at", [("sft", 3), ("dpo", 2)])
def test_crash_inside_a_stage_then_resume(tmp_path, stage, at):
    ref = tmp_path / "ref"
    m_ref = run_pipeline(compose(ARGS), ref)
    d = tmp_path / "crashed"
    with pytest.raises(Crashed):
        run_pipeline(compose(ARGS), d, callbacks=[Crash(stage, at)])
    cur = (d / "checkpoints" / stage / "resume" / "CURRENT").read_text().strip()
    assert cur == f"step-{at // 2 * 2:06d}"  # the last checkpoint before the crash (every 2 steps)
    m = run_pipeline(compose([*ARGS, "resume=true"]), d)
    a, b = _weights(ref / "checkpoints" / stage), _weights(d / "checkpoints" / stage)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert m["sft/samples"] == m_ref["sft/samples"] and m.get("dpo/pairs") == m_ref.get("dpo/pairs")
    assert m.get("sft/copy_loss") == m_ref.get("sft/copy_loss")  # the copy warm start's result, kept for a resume
