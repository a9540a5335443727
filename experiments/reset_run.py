"""Copy a run directory as it was right after one of its stages, so that later stages (or another preset's) can be run
from there with `resume=true`: the paired rows of a comparison (SFT, real GRPO and DreamGym from one DreamGym-S2R run
of the same seed) and ablations that share a run's start.

    python experiments/reset_run.py SRC DST --after sft
    python experiments/run.py conf=webshop_grpo seed=S resume=true hydra.run.dir=DST   # real GRPO from SRC's SFT

What DST keeps: SRC's files, with stages.json's completed list cut after `--after`, its policy pointer at the last kept
policy stage's checkpoint (`checkpoints/<stage>`), the experience pointer back at `checkpoints/experience` (a refresh
in synthetic RL may have moved it), and metrics.json without the dropped stages' keys (budget/* re-derived as
Run.record does). Removed: the dropped stages' checkpoints/, tb/, history/, ranks/ and plots, eval/, and with synthetic
RL its curriculum/ and refreshed experience model.
The replay buffer: removed when the experience stage is dropped (it makes it); when kept while a dropped stage
added to it (real RL, S2R and synthetic RL add online or synthetic rows), the copy would hold those rows, so the
tool stops unless `--keep-replay` says they do not matter (e.g. DST only evaluates a kept policy).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

POLICY_STAGES = ("sft", "dpo", "rl", "synthetic_rl", "s2r")
STAGE_NAMES = ("collect", "sft", "dpo", "rl", "experience", "synthetic_rl", "s2r", "eval")  # dreamgym_pl.stages.STAGES
REPLAY_WRITERS = ("rl", "synthetic_rl", "s2r")  # stages that add rows to replay/ after the experience stage made it
BUDGET_KINDS = ("real_transitions", "synthetic_transitions", "real_resets")
OWNER = {"curriculum": "synthetic_rl", "experience_refresh": "synthetic_rl"}  # metric prefixes that are not a stage's


def kept_stages(completed: list[str], after: str) -> list[str]:
    """The completed stages up to and including `after` (in completion order)."""
    if after == "eval":
        raise ValueError("--after eval: eval/ is what a reset removes; choose the stage before it")
    if after not in completed:
        raise ValueError(f"--after {after}: not a completed stage of this run (completed: {completed})")
    return completed[: completed.index(after) + 1]


def kept_metrics(metrics: dict[str, float], dropped: list[str]) -> dict[str, float]:
    """`metrics` without the dropped stages' keys (`<stage>/...`, and `curriculum/` with synthetic RL), budget/* re-derived from what is left (as
    Run.record: the sum of every `.../*<kind>` counter)."""
    def stage_of(key: str) -> str:
        prefix = key.split("/", 1)[0]
        return OWNER.get(prefix, prefix)

    out = {k: v for k, v in metrics.items() if stage_of(k) not in dropped and not k.startswith("budget/")}
    for kind in BUDGET_KINDS:
        parts = [v for k, v in out.items() if k.endswith(kind)]
        if parts:
            out[f"budget/{kind}"] = float(sum(parts))
    return out


def kept_state(state: dict, kept: list[str]) -> dict:
    """stages.json after the reset: the completed list cut, pointers at the kept stages' checkpoints."""
    out = dict(state, completed=list(kept))
    policies = [s for s in kept if s in POLICY_STAGES]
    out["policy"] = f"checkpoints/{policies[-1]}" if policies else None
    if "experience" in kept:
        if "synthetic_rl" not in kept:  # its refresh may have moved the pointer to checkpoints/experience_refreshed
            out["experience"] = "checkpoints/experience"
    else:
        out.pop("experience", None)
        out.pop("outcome", None)
    return out


def reset(src: Path, dst: Path, after: str, keep_replay: bool = False) -> list[str]:
    """Copy `src` to `dst` as right after stage `after`; returns the dropped stages."""
    state = json.loads((src / "stages.json").read_text())
    kept = kept_stages(list(state["completed"]), after)
    dropped = [s for s in state["completed"] if s not in kept]
    if "experience" in kept and not keep_replay and any(s in REPLAY_WRITERS for s in dropped):
        raise SystemExit(f"{src}/replay holds rows added by {[s for s in dropped if s in REPLAY_WRITERS]}: pass "
                         "--keep-replay if DST's next stages do not read the replay buffer (evaluation, real RL)")
    if dst.exists():
        raise SystemExit(f"{dst} exists: choose a new directory")
    shutil.copytree(src, dst, symlinks=True)
    # every stage not kept, completed or not: a killed stage's resume checkpoints must not survive either
    for stage in [s for s in STAGE_NAMES if s not in kept]:
        for d in (dst / "checkpoints" / stage, dst / "tb" / stage, dst / stage):
            shutil.rmtree(d, ignore_errors=True)
        for pattern in (f"history/{stage}.*", f"plots/{stage}_*", f"ranks/{stage}*"):
            for f in dst.glob(pattern):
                shutil.rmtree(f) if f.is_dir() else f.unlink()
    if "synthetic_rl" in dropped:  # its refreshed experience model and its curriculum's generated tasks
        shutil.rmtree(dst / "checkpoints" / "experience_refreshed", ignore_errors=True)
        shutil.rmtree(dst / "curriculum", ignore_errors=True)
    if "experience" not in kept:  # its replay, outcome model, and the episodes it played (read back on resume)
        shutil.rmtree(dst / "replay", ignore_errors=True)
        shutil.rmtree(dst / "checkpoints" / "outcome", ignore_errors=True)
        (dst / "offline" / "outcome_transitions.jsonl").unlink(missing_ok=True)
    (dst / "stages.json").write_text(json.dumps(kept_state(state, kept), indent=2))
    metrics = json.loads((src / "metrics.json").read_text())
    gone = [s for s in STAGE_NAMES if s not in kept]
    (dst / "metrics.json").write_text(json.dumps(kept_metrics(metrics, gone), indent=2))
    return dropped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--after", required=True, help="the last stage DST keeps (e.g. sft, experience, synthetic_rl)")
    ap.add_argument("--keep-replay", action="store_true",
                    help="keep replay/ although a dropped stage added rows to it (DST will not read it)")
    args = ap.parse_args()
    dropped = reset(args.src, args.dst, args.after, args.keep_replay)
    print(f"{args.dst}: as after {args.after} (stages dropped: {', '.join(dropped) or 'none'}; eval/ removed)")


if __name__ == "__main__":
    sys.exit(main())
