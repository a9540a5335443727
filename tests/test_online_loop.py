"""The online loop: real transitions of the RL stages join the replay buffer, and the experience model's refresh
during synthetic RL changes the weights the synthetic env generates from, and resumes exactly after a crash."""

import json
import shutil

import lightning as L
import pytest
import torch

from dreamgym_pl.core import Observation, Task, Trajectory, Transition
from dreamgym_pl.experience.refresh import refresh_due, refresh_tasks, replay_copies
from dreamgym_pl.experience.synthetic_env import SyntheticEnv
from dreamgym_pl.pipeline import run_pipeline
from dreamgym_pl.replay.buffer import ReplayBuffer, _digest
from dreamgym_pl.replay.embed import HashingEmbedder
from tests.conftest import compose
from tests.test_pipeline import EXP, TINY

WALL_CLOCK = ("seconds", "per_s", "overhead_share", "tokens_per_s")


class Rollouts(L.Callback):
    """Every RL iteration's trajectories by stage, and (synthetic env) a copy of the weights its engine
    generated them with."""

    def __init__(self):
        self.trajs, self.weights = {}, []

    def on_rollouts_end(self, trainer, pl_module, dm, trajs, logs):
        self.trajs.setdefault(trainer.logger.name, []).extend(trajs)
        if isinstance(dm.env, SyntheticEnv):
            self.weights.append({k: v.detach().clone() for k, v in dm.env.engine.model.state_dict().items()})


class Crashed(RuntimeError):
    pass


class Crash(L.Callback):
    """Raises after optimizer step `at` of `stage` (after the stage's own callbacks saved their checkpoint)."""

    def __init__(self, stage, at):
        self.stage, self.at, self.iteration = stage, at, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.logger.name == self.stage and trainer.global_step == self.at:
            self.iteration = trainer.datamodule.iteration  # iterations whose rollouts (and refresh) were done
            raise Crashed(f"crash in {self.stage} at step {self.at}")


def _saved(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _same(a, b):
    """Whether every weight of saved weights `a` equals the one of the same name in `b`."""
    return all(torch.equal(a[k], b[k]) for k in a)


def _buffer(run_dir):
    return ReplayBuffer.load(run_dir / "replay", HashingEmbedder(256))


def test_refresh_schedule_and_tasks_are_fixed_functions():
    assert [i for i in range(8) if refresh_due(i, 3)] == [3, 6] and not any(refresh_due(i, 0) for i in range(8))
    pool = [Task(f"t{i}", f"task {i}") for i in range(20)]
    a = refresh_tasks(pool, 6, seed=1, iteration=4)
    assert a == refresh_tasks(pool, 6, seed=1, iteration=4) and len(a) == 6
    assert a != refresh_tasks(pool, 6, seed=1, iteration=5) and refresh_tasks([], 6, 1, 4) == []


def test_replay_copies_drop_the_generation_record_and_leave_the_originals():
    s = Transition(Task("t", "buy tea"), 0, Observation("search"), "search[tea]", Observation("results"), 0.0, False,
                   info={"prompt": "p", "response_ids": [1, 2], "gen_logprobs": [0.1], "invalid": False})
    (copy,) = replay_copies([Trajectory(Task("t", "buy tea"), [s])], "rl-3")
    assert copy.transitions[0].info == {"invalid": False, "episode": "rl-3-0"}
    assert "prompt" in s.info and _digest(copy.transitions[0]) == _digest(s)


def test_rl_real_transitions_join_the_replay_buffer(tmp_path):
    rec = Rollouts()
    m = run_pipeline(compose(["conf=webshop_grpo", *TINY, "stages=[collect,sft,rl]"]), tmp_path, callbacks=[rec])
    steps = [s for t in rec.trajs["rl"] for s in t.transitions]
    assert len(steps) == m["rl/real_transitions"] > 0
    buf = _buffer(tmp_path)
    online = [t for t, src in zip(buf.items, buf.sources) if src == "online"]
    # every distinct real transition once (a group's identical first steps are one entry), nothing else
    assert len(online) == len(buf) == m["rl/replay_added"] == m["rl/replay_size"] == len({_digest(s) for s in steps})
    assert {_digest(t) for t in online} == {_digest(s) for s in steps}
    assert all(t.reasoning and "prompt" not in t.info and t.info["episode"].startswith("rl-") for t in online)
    # counted once, as the stage's real transitions
    assert m["budget/real_transitions"] == m["collect/real_transitions"] + m["rl/real_transitions"]


REFRESH = ["experience.refresh_every=1", "experience.refresh_episodes=2", "experience.refresh_steps=2",
           "checkpoint_every=2", "experience.invalid_action=end", "synthetic_rl.synthetic_budget=60",
           "eval.curve_every=0", "curriculum.lambda_=0.5", "curriculum.min_variance=0.01"]
# found, not fixed (closing note of 2026-12-01, late night): with near-miss episodes in collect
# (`+collect.agents.near_miss=10` or 800) the refresh's logged losses of the crashed and resumed run differ from the
# uninterrupted run's in the 6th digit (5.646963 vs 5.646958), outcome model on or off alike; the same with the
# presets' hasty episodes (5.668361 vs 5.668359, 2026-12-03), so this test keeps the oracle data it was written on
ARGS = ["conf=webshop_dreamgym", *TINY, *EXP, *REFRESH, "stages=[collect,sft,experience,synthetic_rl]",
        "collect.agents.hasty=0", "sft.source=all", "sft.min_score=null"]


def test_refresh_changes_the_synthetic_env_and_resumes_exactly(tmp_path):
    base, ref, crashed = tmp_path / "base", tmp_path / "ref", tmp_path / "crashed"
    run_pipeline(compose([*ARGS, "stages=[collect,sft,experience]"]), base)
    shutil.copytree(base, ref)
    shutil.copytree(base, crashed)
    rec = Rollouts()
    m = run_pipeline(compose([*ARGS, "resume=true"]), ref, callbacks=[rec])
    # the experience model was fine-tuned, and the synthetic env generated from its weights of the moment
    before, after = _saved(base / "checkpoints" / "experience"), _saved(ref / "checkpoints" / "experience_refreshed")
    assert not _same(before, after)
    assert _same(before, rec.weights[0]) and _same(after, rec.weights[-1])  # iteration 0 precedes the first refresh
    assert not _same(after, rec.weights[1]) and not _same(before, rec.weights[1])  # each refresh moves it
    assert json.loads((ref / "stages.json").read_text())["experience"] == "checkpoints/experience_refreshed"
    # one refresh before every iteration after the first; its real steps counted at the metered real env
    n = m["synthetic_rl/iterations"]
    assert n >= 3 and m["experience_refresh/refreshes"] == n - 1 and m["experience_refresh/steps"] == 2 * (n - 1)
    assert m["experience_refresh/episodes"] == 2 * (n - 1)
    assert m["synthetic_rl/real_transitions"] == m["experience_refresh/transitions"] > 0
    assert m["synthetic_rl/real_resets"] > m["experience_refresh/episodes"]  # + the stored first observations
    assert m["budget/real_transitions"] == m["collect/real_transitions"] + m["experience/real_transitions"] \
        + m.get("experience/outcome_real_transitions", 0) \
        + m["synthetic_rl/real_transitions"]
    buf = _buffer(ref)
    assert 0 < buf.count("online") <= m["experience_refresh/transitions"]
    # not asserted: that later synthetic steps are shown them. In this tiny run no synthetic step retrieves at all
    # (replay/reads_offline is 0 too: every policy action is invalid, so each episode ends before retrieval), which is
    # why reads_online read 0 here (2026-12-07); replay.online_k's quota is tested in test_replay.py
    history = json.loads((ref / "history" / "synthetic_rl.json").read_text())
    assert "experience_refresh/loss_last" not in history[0] and history[1]["experience_refresh/steps"] == 2

    # one batch an iteration: the crash after iteration 2's comes after iteration 3's refresh and rollouts (fetched
    # ahead), which the last checkpoint (after iteration 1's batch, holding iteration 2's) lacks: they are redone
    crash = Crash("synthetic_rl", 3)
    with pytest.raises(Crashed):
        run_pipeline(compose([*ARGS, "resume=true"]), crashed, callbacks=[crash])
    cur = crashed / "checkpoints" / "synthetic_rl" / "resume"
    vdir = cur / (cur / "CURRENT").read_text().strip()
    it = json.loads((vdir / "stream.json").read_text())["iteration"]
    saved = json.loads((vdir / "synthetic_env.json").read_text())
    assert saved["refresh"]["refreshes"] == it - 1 >= 1 and crash.iteration > it
    assert 0 < saved["meter"]["transitions"] < m["synthetic_rl/real_transitions"]
    assert not _same(before, _saved(vdir / "experience"))
    got = run_pipeline(compose([*ARGS, "resume=true"]), crashed)
    keep = lambda d: {k: v for k, v in d.items() if not any(w in k for w in WALL_CLOCK)  # noqa: E731
                      and k != "synthetic_rl/redone_transitions"}
    assert keep(got) == keep(m)
    for stage in ("synthetic_rl", "experience_refreshed"):
        assert _same(_saved(ref / "checkpoints" / stage), _saved(crashed / "checkpoints" / stage)), stage
    h_got, h_want = ([{k: v for k, v in h.items() if not k.startswith("perf/")}
                      for h in json.loads((d / "history" / "synthetic_rl.json").read_text())] for d in (crashed, ref))
    assert h_got == h_want
    b = _buffer(crashed)
    assert b.items == buf.items and b.sources == buf.sources
