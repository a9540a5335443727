"""Kill storm: a tiny `conf=webshop_s2r` run SIGKILLed at seeded random points in every stage and resumed each
time ends with the same counters, replay buffer and budgets as an unkilled run of the same seed.

No tolerance: every stage starts from random states that depend on (seed, stage) only, every RL iteration's
random streams on (seed, iteration), and an RL checkpoint holds everything the iterations after it depend on
(weights, optimizer, lr schedule, the untrained mini-batches of the iteration Lightning has already fetched,
counters, replay buffer, curriculum and its random state, stored first observations). So the work a kill
throws away is redone identically, and counted once. The comparison covers every metric except wall-clock
ones (seconds, throughputs, overhead shares), which no two runs share."""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

from dreamgym_pl.replay.buffer import ReplayBuffer
from dreamgym_pl.replay.embed import HashingEmbedder
from tests.conftest import ROOT
from tests.test_resume import ARGS

# step checkpoints every 2 steps; more random-agent episodes, so that collect lasts long enough to be killed in,
# and more eval goals, so that eval does too. A kill lands at most KILL_SHARE of the reference stage's time into
# what is left of it: the same stage ran up to ~30% faster in a later launch (warm caches; collect with 200 random
# episodes: 0.69 s in the reference, 0.47 s resumed, and a CI kill at 0.63 x 0.69 s landed after it ended)
RANDOM_EPISODES = 400
STORM = ["checkpoint_steps=2", f"collect.agents.random={RANDOM_EPISODES}", "eval.num_goals=48"]
KILL_SHARE = 0.5
STAGES = ["collect", "sft", "experience", "synthetic_rl", "s2r", "eval"]
KILLS = {"collect": 3, "sft": 4, "experience": 4, "synthetic_rl": 4, "s2r": 3, "eval": 3}  # 21 in all
WALL_CLOCK = ("seconds", "per_s", "overhead_share", "tokens_per_s")
REDONE = ("synthetic_rl/redone_transitions", "s2r/redone_transitions")  # what kills threw away: 0 without kills
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _launch(run_dir, resume):
    return subprocess.Popen([sys.executable, str(ROOT / "experiments/run.py"), *ARGS, *STORM,
                             f"resume={str(resume).lower()}", f"hydra.run.dir={run_dir}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=ENV)


class _Watch:
    """Reads a run's output in a thread; `started[stage]` is when the log said `stage <stage>: start`."""

    def __init__(self, proc):
        self.proc, self.lines, self.started = proc, [], {}
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            for s in STAGES:
                if f"stage {s}: start" in line:
                    self.started[s] = time.time()


def _left(run_dir, stage, ref_m):
    """The share of `stage` a resumed launch still has to do, from its last checkpoint (1 without one)."""
    cur = run_dir / "checkpoints" / stage / "resume" / "CURRENT"
    if not cur.exists():
        return 1.0
    vdir = cur.parent / cur.read_text().strip()
    if (vdir / "progress.json").exists():  # sft, experience: steps
        p = json.loads((vdir / "progress.json").read_text())
        return max(0.1, 1 - p["step"] / p["total"])
    it = json.loads((vdir / "stream.json").read_text())["iteration"]  # RL: iterations
    return max(0.1, 1 - it / max(1.0, ref_m[f"{stage}/iterations"]))


def _counters(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    keep = {k: v for k, v in m.items() if not any(w in k for w in WALL_CLOCK)}
    buf = ReplayBuffer.load(run_dir / "replay", HashingEmbedder(256))
    keep.update({"replay/entries": len(buf), "replay/offline": buf.count("offline"),
                 "replay/synthetic": buf.count("synthetic"), "replay/online": buf.count("online")})
    return keep


def test_kill_storm(tmp_path):
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "killed"
    t0 = time.time()
    ref = _launch(ref_dir, False)
    w = _Watch(ref)
    assert ref.wait(timeout=600) == 0, "".join(w.lines[-60:])
    w.thread.join()
    ref_m = json.loads((ref_dir / "metrics.json").read_text())
    duration = {s: ref_m[f"{s}/seconds"] for s in STAGES}
    ref_seconds = time.time() - t0

    rng = random.Random(20)
    todo = dict(KILLS)
    kills, launches = [], 0
    while True:
        done = json.loads((run_dir / "stages.json").read_text())["completed"] if (run_dir / "stages.json").exists() else []
        todo.update({s: 0 for s in done})
        target = next((s for s in STAGES if todo[s] > 0), None)
        left = _left(run_dir, target, ref_m) if target else 1.0
        proc = _launch(run_dir, resume=launches > 0)
        launches += 1
        w = _Watch(proc)
        killed = False
        while target is not None and proc.poll() is None:
            if target in w.started:  # a random point of what is left of the stage
                time.sleep(rng.uniform(0.0, KILL_SHARE) * duration[target] * left)
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    done = json.loads((run_dir / "stages.json").read_text())["completed"] \
                        if (run_dir / "stages.json").exists() else []
                    hit = STAGES[len(done)] if len(done) < len(STAGES) else "end"  # the stage that was running
                    kills.append(hit)
                    print(f"launch {launches}: target {target}, killed in {hit}", flush=True)
                    killed = True
                    todo[hit] = max(0, todo.get(hit, 0) - 1)
                break
            time.sleep(0.005)
        if not killed:
            print(f"launch {launches}: target {target}, ran to the end", flush=True)
            assert proc.wait(timeout=600) == 0, "".join(w.lines[-60:])
            w.thread.join()
            if target is None:
                break
        assert launches < 40, kills
    log = "".join(w.lines)
    assert "stage collect: already completed" in log
    assert json.loads((run_dir / "stages.json").read_text())["completed"] == STAGES
    got, want = _counters(run_dir), _counters(ref_dir)
    redone = {k: got.pop(k) for k in REDONE}
    assert all(want.pop(k) == 0 for k in REDONE) and all(v >= 0 for v in redone.values())
    diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
    assert not diff, (diff, kills)
    assert len(kills) >= 20 and set(kills) >= set(STAGES), kills  # every stage was hit ("end": after the last)
    # the RL stages' per-iteration logs (rollout success, scores, steps, budgets, curriculum): the same iterations
    for stage in ("synthetic_rl", "s2r"):
        h_got, h_want = ([{k: v for k, v in h.items() if not k.startswith("perf/")}
                          for h in json.loads((d / "history" / f"{stage}.json").read_text())] for d in (run_dir, ref_dir))
        assert h_got == h_want, stage
    assert want["synthetic_rl/synthetic_transitions"] >= 200
    # real resets, counted where they happen: one per episode of collect (30 + 20 + 30 hasty + random episodes), of the
    # experience stage's on-policy check (4) and of s2r; synthetic RL's stored first observations, one per start task
    assert want["collect/real_resets"] == 80 + RANDOM_EPISODES and want["experience/real_resets"] == 4
    assert want["s2r/real_resets"] == sum(h["rollout/episodes"] for h in
                                          json.loads((ref_dir / "history" / "s2r.json").read_text()))
    assert 0 < want["synthetic_rl/real_resets"] <= want["synthetic_rl/synthetic_transitions"]
    assert want["synthetic_rl/real_transitions"] == 0  # measured at the real env: synthetic RL never stepped it
    assert want["budget/real_resets"] == sum(want[f"{s}/real_resets"] for s in ("collect", "experience", "synthetic_rl",
                                                                                 "s2r")) \
        + want.get("experience/outcome_real_resets", 0)  # the outcome model's own scripted episodes
    assert want["replay/offline"] + want["replay/synthetic"] == want["synthetic_rl/replay_size"]
    assert want["replay/entries"] == want["synthetic_rl/replay_size"] + want["replay/online"] == want["s2r/replay_size"]
    assert 0 < want["replay/online"] == want["s2r/replay_added"] <= want["s2r/real_transitions"]  # s2r's, once each
    assert want["budget/real_transitions"] == want["collect/real_transitions"] + want["experience/real_transitions"] \
        + want.get("experience/outcome_real_transitions", 0) \
        + want["s2r/real_transitions"]
    print(f"reference run {ref_seconds:.0f} s; {len(kills)} kills over {launches} launches: {kills}; "
          f"transitions redone after kills: {redone}")
