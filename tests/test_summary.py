from dreamgym_pl.summary import run_summary


def test_run_summary_hand_computed():
    m = {"sft/seconds": 147.4, "sft/val_success_rate": 0.43, "sft/test_success_rate": 0.4,
         "synthetic_rl/seconds": 274.0, "synthetic_rl/test_success_rate": 0.34, "synthetic_rl/real_transitions": 0.0,
         "synthetic_rl/synthetic_transitions": 4132.0, "eval/seconds": 4.7, "eval/success_rate": 0.35}
    lines = run_summary(m, ["sft", "synthetic_rl", "eval"]).splitlines()
    assert lines[0].split() == ["stage", "seconds", "val", "success", "test", "success", "real", "transitions",
                                "synthetic", "transitions"]
    assert set(lines[1]) == {"-"}
    assert lines[2].split() == ["sft", "147", "0.430", "0.400", "-", "-"]
    assert lines[3].split() == ["synthetic_rl", "274", "-", "0.340", "0", "4132"]
    assert lines[4].split() == ["eval", "5", "-", "0.350", "-", "-"]
