"""experiments/reset_run.py on a hand-made run directory (no model): what a reset keeps and drops."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

from reset_run import kept_metrics, kept_state, reset  # noqa: E402

STAGES = ["collect", "sft", "experience", "synthetic_rl", "s2r", "eval"]


def _run(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for d in ("offline", "replay", "curriculum", "eval", "history", "plots", "tb/sft", "tb/s2r",
              "checkpoints/sft", "checkpoints/experience", "checkpoints/outcome", "checkpoints/synthetic_rl",
              "checkpoints/experience_refreshed", "checkpoints/s2r/resume"):
        (src / d).mkdir(parents=True, exist_ok=True)
    (src / "checkpoints/rl/resume").mkdir(parents=True)  # a killed, uncompleted stage
    for f in ("history/synthetic_rl.json", "history/s2r.json", "plots/s2r_rollouts.png", "replay/CURRENT",
              "offline/transitions.jsonl", "offline/outcome_transitions.jsonl"):
        (src / f).write_text("x")
    (src / "stages.json").write_text(json.dumps({"completed": STAGES, "policy": "checkpoints/s2r",
                                                 "experience": "checkpoints/experience_refreshed",
                                                 "outcome": "checkpoints/outcome"}))
    (src / "metrics.json").write_text(json.dumps({
        "collect/real_transitions": 100.0, "sft/test_success_rate": 0.1, "experience/outcome_real_transitions": 40.0,
        "synthetic_rl/synthetic_transitions": 4000.0, "s2r/real_transitions": 560.0, "eval/success_rate": 0.2,
        "budget/real_transitions": 700.0, "budget/synthetic_transitions": 4000.0}))
    return src


def test_kept_metrics_by_hand():
    m = {"collect/real_transitions": 100.0, "s2r/real_transitions": 560.0, "s2r/test_success_rate": 0.3,
         "sft/test_success_rate": 0.1, "budget/real_transitions": 660.0, "curriculum/num_generated": 3.0}
    assert kept_metrics(m, ["s2r", "eval"]) == {"collect/real_transitions": 100.0, "sft/test_success_rate": 0.1,
                                                 "budget/real_transitions": 100.0, "curriculum/num_generated": 3.0}
    assert "curriculum/num_generated" not in kept_metrics(m, ["synthetic_rl", "s2r", "eval"])  # synthetic RL's


def test_kept_state_points_at_the_kept_stages():
    state = {"completed": STAGES, "policy": "checkpoints/s2r", "experience": "checkpoints/experience_refreshed",
             "outcome": "checkpoints/outcome"}
    assert kept_state(state, STAGES[:4]) == {"completed": STAGES[:4], "policy": "checkpoints/synthetic_rl",  # as it left
                                            "experience": "checkpoints/experience_refreshed", "outcome": "checkpoints/outcome"}
    assert kept_state(state, STAGES[:3])["experience"] == "checkpoints/experience"  # the refresh dropped
    assert kept_state(state, STAGES[:2]) == {"completed": STAGES[:2], "policy": "checkpoints/sft"}
    assert kept_state(state, STAGES[:1]) == {"completed": STAGES[:1], "policy": None}


def test_reset_after_sft_drops_what_later_stages_made(tmp_path):
    dst = tmp_path / "dst"
    assert reset(_run(tmp_path), dst, "sft") == ["experience", "synthetic_rl", "s2r", "eval"]
    assert json.loads((dst / "stages.json").read_text()) == {"completed": ["collect", "sft"], "policy": "checkpoints/sft"}
    left = sorted(str(p.relative_to(dst)) for p in dst.rglob("*"))
    assert left == ["checkpoints", "checkpoints/sft", "history", "metrics.json", "offline", "offline/transitions.jsonl",
                    "plots", "stages.json", "tb", "tb/sft"]  # the experience stage's episodes and rl's resume go too
    assert json.loads((dst / "metrics.json").read_text()) == {
        "collect/real_transitions": 100.0, "sft/test_success_rate": 0.1, "budget/real_transitions": 100.0}


def test_reset_keeping_experience_guards_the_replay(tmp_path):
    src = _run(tmp_path)
    with pytest.raises(SystemExit, match="--keep-replay"):
        reset(src, tmp_path / "dst", "synthetic_rl")  # s2r added online rows to replay/
    assert not (tmp_path / "dst").exists()
    reset(src, tmp_path / "dst", "synthetic_rl", keep_replay=True)
    assert (tmp_path / "dst" / "replay" / "CURRENT").exists() and (tmp_path / "dst" / "checkpoints" / "outcome").exists()
    assert not (tmp_path / "dst" / "checkpoints" / "s2r").exists() and (tmp_path / "dst" / "curriculum").exists()
    assert (tmp_path / "dst" / "history" / "synthetic_rl.json").exists() and not (tmp_path / "dst" / "eval").exists()


def test_reset_after_eval_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--after eval"):
        reset(_run(tmp_path), tmp_path / "dst", "eval")


def test_cli_names_a_stage_the_run_did_not_complete(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "experiments/reset_run.py"), str(_run(tmp_path)),
                        str(tmp_path / "dst"), "--after", "rl"], capture_output=True, text=True)
    assert p.returncode != 0 and "--after rl" in p.stderr
