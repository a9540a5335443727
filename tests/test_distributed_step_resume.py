"""Step checkpoints under data parallelism: 2 CPU processes (torchrun, gloo) train sft, crash on both ranks right
after a step checkpoint, and resume; the resumed weights equal an uninterrupted 2-rank run's, because each rank
skips exactly its own batches of the one seeded sequence (`stages/resume.py`, `_Rest`)."""

import json
import os
import subprocess
import sys

import torch

from tests.conftest import ROOT
from tests.test_pipeline import TINY

ARGS = [*TINY, "trainer=ddp_cpu", "stages=[collect,sft]", "sft.max_steps=6", "checkpoint_steps=2"]

WORKER = """
import os, sys
sys.path.insert(0, {root!r})
import lightning as L
from dreamgym_pl.pipeline import run_pipeline
from tests.conftest import compose
from tests.test_step_resume import Crash


class Steps(L.Callback):  # the optimizer steps this fit of sft took, per rank
    def on_train_end(self, trainer, pl_module):
        if trainer.logger.name == "sft":
            with open(os.path.join({out!r}, "fit_steps_rank%d" % trainer.global_rank), "w") as f:
                f.write(str(trainer.global_step))


args, crash = {args!r}, {crash!r}
run_pipeline(compose(args), {out!r}, callbacks=[Crash("sft", crash)] if crash else [Steps()])
"""


def _torchrun(tmp_path, name, out, args, crash=None):
    script = tmp_path / f"{name}.py"
    script.write_text(WORKER.format(root=str(ROOT), args=list(args), crash=crash, out=str(out)))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_ddp_sft_crash_then_resume_equals_uninterrupted(tmp_path):
    ref, d = tmp_path / "ref", tmp_path / "crashed"
    p = _torchrun(tmp_path, "ref", ref, ARGS)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    p = _torchrun(tmp_path, "crash", d, ARGS, crash=3)
    assert p.returncode != 0 and "crash in sft at step 3" in p.stdout + p.stderr, p.stderr[-3000:]
    assert (d / "checkpoints" / "sft" / "resume" / "CURRENT").read_text().strip() == "step-000002"
    p = _torchrun(tmp_path, "resume", d, [*ARGS, "resume=true"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # both ranks trained the 4 steps after the checkpoint (a restart would train 6)
    assert [(d / f"fit_steps_rank{r}").read_text() for r in (0, 1)] == ["4", "4"]
    assert [(ref / f"fit_steps_rank{r}").read_text() for r in (0, 1)] == ["6", "6"]
    a, b = _weights(ref / "checkpoints" / "sft"), _weights(d / "checkpoints" / "sft")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    m_ref, m = (json.loads((x / "metrics.json").read_text()) for x in (ref, d))
    assert m["sft/samples"] == m_ref["sft/samples"]
