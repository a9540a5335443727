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
