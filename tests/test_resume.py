"""A tiny run killed with SIGKILL in the middle of synthetic RL resumes to completion with consistent state."""

import json
import os
import signal
import subprocess
import sys
import time

from dreamgym_pl.replay.buffer import ReplayBuffer, _digest
from dreamgym_pl.replay.embed import HashingEmbedder
from tests.conftest import ROOT
from tests.test_pipeline import EXP, TINY

# the paper's invalid-action rule: an untrained policy's episodes end at once, so synthetic RL has many short
# iterations (and checkpoints) to be killed between
ARGS = ["conf=webshop_s2r", *TINY, *EXP, "synthetic_rl.synthetic_budget=200", "checkpoint_every=1",
        "curriculum.lambda_=0.5", "curriculum.max_uses=2", "curriculum.min_variance=0.01",
        "experience.invalid_action=end"]


def _run(run_dir, extra=()):
    return subprocess.Popen([sys.executable, str(ROOT / "experiments/run.py"), *ARGS, *extra, f"hydra.run.dir={run_dir}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_sigkill_mid_stage_then_resume(tmp_path):
    run_dir = tmp_path / "run"
    proc = _run(run_dir)
    cur = run_dir / "checkpoints" / "synthetic_rl" / "resume" / "CURRENT"
    deadline = time.time() + 600
    while time.time() < deadline:
        if cur.exists() and int(cur.read_text().strip().split("-")[1]) >= 3:
            break
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(0.2)
    else:
        raise AssertionError("no synthetic_rl checkpoint appeared in time")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    stages = json.loads((run_dir / "stages.json").read_text())["completed"]
    assert stages == ["collect", "sft", "experience"]
    ckpt = json.loads((cur.parent / cur.read_text().strip() / "stream.json").read_text())
    killed_at = ckpt["iteration"]
    metrics_before = json.loads((run_dir / "metrics.json").read_text())

    out = subprocess.run([sys.executable, str(ROOT / "experiments/run.py"), *ARGS, "resume=true",
                          f"hydra.run.dir={run_dir}"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    log = out.stdout + out.stderr
    assert f"synthetic_rl: resuming from iteration {killed_at}" in log
    assert "stage collect: already completed" in log and "stage experience: already completed" in log
    m = json.loads((run_dir / "metrics.json").read_text())
    assert json.loads((run_dir / "stages.json").read_text())["completed"] == [
        "collect", "sft", "experience", "synthetic_rl", "s2r", "eval"]
    # counters: the offline budget is counted once, RL stages add exactly what they consumed
    assert m["collect/real_transitions"] == metrics_before["collect/real_transitions"]
    assert m["budget/real_transitions"] == m["collect/real_transitions"] + m.get("experience/real_transitions", 0) \
        + m.get("experience/outcome_real_transitions", 0) + m["s2r/real_transitions"]
    assert m["budget/synthetic_transitions"] == m["synthetic_rl/synthetic_transitions"] >= 200
    assert m["synthetic_rl/iterations"] > killed_at
    # replay buffer: all offline transitions kept, no duplicates, synthetic and online entries added on top
    buf = ReplayBuffer.load(run_dir / "replay", HashingEmbedder(256))
    live = [t for i, t in enumerate(buf.items) if i not in buf.deleted]
    assert len({_digest(t) for t in live}) == len(live)
    assert buf.count("offline") == m["experience/replay_size"]
    # s2r's real transitions join it as online entries
    assert len(buf) == buf.count("offline") + buf.count("synthetic") + buf.count("online")
    assert buf.count("online") == m["s2r/replay_added"] > 0
