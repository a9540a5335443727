"""Small pure parts of the experiment tools."""

import sys

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "experiments"))

from check_same_metrics import differences  # noqa: E402


def test_same_metrics_ignores_timing_keys_only():
    a = {"sft/seconds": 1.0, "s2r/transitions_per_s": 3.0, "synthetic_rl/overhead_share": 0.1, "eval/success_rate": 0.5}
    b = {"sft/seconds": 2.0, "s2r/transitions_per_s": 4.0, "synthetic_rl/overhead_share": 0.2, "eval/success_rate": 0.5}
    assert differences(a, b) == []
    b["eval/success_rate"] = 0.6
    b["new/key"] = 1.0
    assert differences(a, b) == ["eval/success_rate: 0.5 != 0.6", "new/key: None != 1.0"]


def test_benchmark_table_hand_values(tmp_path):
    """plot_table: per-seed means over the goals every run holds, the mean, the difference to the base row."""
    from plot_table import main, table

    sft = {0: {"g1": 0.0, "g2": 1.0, "g3": 1.0}, 1: {"g1": 0.0, "g2": 0.0}}  # g3: not in every run, left out
    rl = {0: {"g1": 1.0, "g2": 1.0}, 1: {"g1": 1.0, "g2": 0.0}}
    md, records = table({"SFT": sft, "RL": rl}, "SFT", [("SFT", "RL")], n_boot=200)
    assert [r["seeds"] for r in records] == [{0: 0.5, 1: 0.0}, {0: 1.0, 1: 0.5}]
    assert [r["mean"] for r in records] == [0.25, 0.75]
    assert records[0]["diff"] is None and records[1]["diff"][0] == 0.5  # every pair differs on g1 only
    assert "| SFT | 0.500 | 0.000 | 0.250 | - |" in md and "| RL | 1.000 | 0.500 | 0.750 | +50.0 (" in md
    assert "SFT - RL: -50.0 (" in md and "(2 goals x 2 seeds" in md

    import json

    dirs = {}
    for name, runs in (("sft", sft), ("rl", rl)):
        for seed, outcomes in runs.items():
            d = dirs.setdefault(name, [])
            run = tmp_path / f"{name}{seed}"
            (run / "eval").mkdir(parents=True)
            (run / "config.yaml").write_text(f"seed: {seed}\n")
            (run / "eval" / "test_outcomes.jsonl").write_text(
                "".join(json.dumps({"task_id": g, "success": v, "score": v}) + "\n" for g, v in outcomes.items()))
            d.append(str(run))
    main(["--row", "SFT", *dirs["sft"], "--row", "RL", *dirs["rl"], "--base", "SFT", "--n-boot", "50",
          "--out", str(tmp_path / "out")])
    assert (tmp_path / "out" / "table_test.png").stat().st_size > 0
    assert "| RL | 1.000 | 0.500 | 0.750 |" in (tmp_path / "out" / "table_test.md").read_text()


def test_task_generation_yield_share_of_seeds_hand_values():
    from task_generation_yield import seeds_with_accepted

    rows = [[False, True, False], [False, False, False], [True, False, False], [False, False, True]]
    assert seeds_with_accepted(rows, 1) == 0.25
    assert seeds_with_accepted(rows, 2) == 0.5
    assert seeds_with_accepted(rows, 3) == 0.75
    assert seeds_with_accepted([], 3) == 0.0
