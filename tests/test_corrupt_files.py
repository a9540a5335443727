"""Every run-directory file a resumed run reads, damaged, gives a CorruptFileError that names the file and says
what to do, instead of a traceback from deep inside a reader (or, worse, a silent fresh start)."""

import shutil
import subprocess
import sys

import pytest

from dreamgym_pl.run import CorruptFileError, VersionedDir, atomic_write_json
from tests.conftest import ROOT, compose
from tests.test_pipeline import EXP, TINY

ARGS = ["stages=[collect,sft,experience,synthetic_rl]", "conf=webshop_s2r", *TINY, *EXP,
        "synthetic_rl.synthetic_budget=30", "checkpoint_every=1", "experience.invalid_action=end"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A tiny run through synthetic RL (its last RL checkpoint stays in checkpoints/synthetic_rl/resume)."""
    d = tmp_path_factory.mktemp("corrupt") / "run"
    out = subprocess.run([sys.executable, str(ROOT / "experiments/run.py"), *ARGS, f"hydra.run.dir={d}"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return d


def _copy(finished, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(finished, d)
    return d


def _run(d):
    from dreamgym_pl.stages import Run

    return Run(compose([*ARGS, "resume=true"]), d)


def _ckpt(d):
    return VersionedDir(d / "checkpoints" / "synthetic_rl" / "resume", prefix="it").current()


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if len(data) > 1 else b"\x00garbage")


def _load_checkpoint(d):
    from dreamgym_pl.stages.policy import load_rl_checkpoint

    return load_rl_checkpoint(_run(d), "synthetic_rl")


def _load_replay(d):
    from dreamgym_pl.stages.experience import load_replay

    return load_replay(_run(d))


CHECKPOINT_FILES = ["stream.json", "optimizer.pt", "scheduler.pt", "pending_rank0.pt", "last_rank0.jsonl",
                    "model/model.safetensors", "model/config.json", "replay/CURRENT", "synthetic_env.json",
                    "curriculum/state.json", "curriculum/generated_tasks.jsonl", "MANIFEST.json"]


@pytest.mark.parametrize("rel", CHECKPOINT_FILES)
def test_rl_checkpoint_file(finished, tmp_path, rel):
    d = _copy(finished, tmp_path)
    vdir = _ckpt(d)
    if rel == "pending_rank0.pt" and not (vdir / rel).exists():
        pytest.skip("the last checkpoint came after the last iteration's rollouts")
    _load_checkpoint(d)  # whole, it loads
    _truncate(vdir / rel)
    with pytest.raises(CorruptFileError) as e:
        _load_checkpoint(d)
    msg = str(e.value)
    assert rel.split("/")[-1] in msg and f"delete {vdir.parent}" in msg and "resume=false" in msg


def test_rl_checkpoint_pointer(finished, tmp_path):
    d = _copy(finished, tmp_path)
    ptr = d / "checkpoints" / "synthetic_rl" / "resume" / "CURRENT"
    ptr.write_text("it-99")
    with pytest.raises(CorruptFileError, match="CURRENT: points to 'it-99'.*delete .*resume=false"):
        _load_checkpoint(d)


def test_rl_checkpoint_file_missing(finished, tmp_path):
    d = _copy(finished, tmp_path)
    (_ckpt(d) / "optimizer.pt").unlink()
    with pytest.raises(CorruptFileError, match="optimizer.pt: missing"):
        _load_checkpoint(d)


@pytest.mark.parametrize("name", ["stages.json", "metrics.json"])
def test_run_state_files(finished, tmp_path, name):
    d = _copy(finished, tmp_path)
    _truncate(d / name)
    with pytest.raises(CorruptFileError, match=f"{name}: not valid JSON.*resume=false"):
        _run(d)


def test_stages_json_without_its_keys(finished, tmp_path):
    d = _copy(finished, tmp_path)
    atomic_write_json(d / "stages.json", {"done": []})
    with pytest.raises(CorruptFileError, match=r"stages.json: not the expected contents \(a mapping with \['completed'"):
        _run(d)


@pytest.mark.parametrize("rel", ["meta.json", "index.bin", "entries.jsonl"])
def test_replay_files(finished, tmp_path, rel):
    d = _copy(finished, tmp_path)
    vdir = VersionedDir(d / "replay").current()
    _truncate(vdir / rel)
    with pytest.raises(CorruptFileError) as e:
        _load_replay(d)
    assert rel in str(e.value) and "resume=false" in str(e.value) and "experience" in str(e.value)


def test_replay_pointer(finished, tmp_path):
    d = _copy(finished, tmp_path)
    (d / "replay" / "CURRENT").write_text("\x00\x01")
    with pytest.raises(CorruptFileError, match="replay/CURRENT: points to"):
        _load_replay(d)


@pytest.mark.parametrize("rel", ["progress.json", "weights.pt", "optimizer.pt", "scheduler.pt"])
def test_step_checkpoint_files(finished, tmp_path, rel):
    """sft's step checkpoint (the last one, after its final step), read as a resumed sft would."""
    from dreamgym_pl.policy.algos.sft import SFT
    from dreamgym_pl.policy.module import PolicyModule
    from dreamgym_pl.stages.resume import load_step_state

    d = _copy(finished, tmp_path)
    run = _run(d)
    model, tok = run.load_policy("checkpoints/base")
    module = PolicyModule(model, tok, SFT(), lr=1e-3)
    assert load_step_state(run, "sft", module)["step"] == 5  # whole, it loads
    _truncate(VersionedDir(d / "checkpoints" / "sft" / "resume", prefix="step").current() / rel)
    with pytest.raises(CorruptFileError) as e:
        load_step_state(run, "sft", module)
    assert rel in str(e.value) and "delete" in str(e.value) and "resume=false" in str(e.value)


def test_step_checkpoint_of_another_world_size(finished, tmp_path, monkeypatch):
    """A step checkpoint records the ranks that wrote it (its step counts each rank's batches); a resume under
    another number fails before training, naming the numbers and the folder."""
    import json

    from dreamgym_pl.policy.algos.sft import SFT
    from dreamgym_pl.policy.module import PolicyModule
    from dreamgym_pl.stages.resume import load_step_state

    d = _copy(finished, tmp_path)
    run = _run(d)
    model, tok = run.load_policy("checkpoints/base")
    module = PolicyModule(model, tok, SFT(), lr=1e-3)
    progress = VersionedDir(d / "checkpoints" / "sft" / "resume", prefix="step").current() / "progress.json"
    assert json.loads(progress.read_text())["world"] == 1
    monkeypatch.setattr("dreamgym_pl.stages.resume.dist.world", lambda: 2)  # the same run resumed by 2 ranks
    with pytest.raises(ValueError, match="written by 1 rank.*this run has 2.*trainer.devices"):
        load_step_state(run, "sft", module)


@pytest.mark.parametrize("rel", ["checkpoints/sft/model.safetensors", "checkpoints/sft/config.json"])
def test_stage_policy_checkpoint(finished, tmp_path, rel):
    """The policy a finished stage left (stages.json's `policy`), which the next stage starts from."""
    d = _copy(finished, tmp_path)
    _truncate(d / rel)
    with pytest.raises(CorruptFileError, match="checkpoints/sft: cannot be read.*resume=false"):
        _run(d).load_policy("checkpoints/sft")


def test_offline_transitions(finished, tmp_path):
    d = _copy(finished, tmp_path)
    _truncate(d / "offline" / "transitions.jsonl")
    with pytest.raises(CorruptFileError, match="transitions.jsonl.*resume=false"):
        _run(d).offline_trajectories()


def test_rl_progress_file(finished, tmp_path):
    """The count of transitions consumed so far (for redone_transitions), read when an RL stage resumes."""
    from dreamgym_pl.stages.callbacks import RLCheckpoint

    d = _copy(finished, tmp_path)
    progress = d / "checkpoints" / "synthetic_rl" / "resume" / "progress.json"
    state = {"consumed": 0}
    assert RLCheckpoint(lambda m, dm: None, 1, state, progress, resume=True).redone >= 0  # whole, it reads
    _truncate(progress)
    with pytest.raises(CorruptFileError, match="progress.json: not valid JSON.*delete"):
        RLCheckpoint(lambda m, dm: None, 1, state, progress, resume=True)
