"""The end-of-run summary that `experiments/run.py` prints: per stage its wall time, its policy's val and test
success and the real / synthetic transitions it used (a pure function of the run's metrics)."""

from __future__ import annotations

from typing import Mapping, Sequence


def _cell(metrics: Mapping[str, float], key: str, fmt: str) -> str:
    return format(metrics[key], fmt) if key in metrics else "-"


def run_summary(metrics: Mapping[str, float], stages: Sequence[str]) -> str:
    """A plain-text table, one row per stage in run order; `-` where a stage has no such number."""
    rows = [("stage", "seconds", "val success", "test success", "real transitions", "synthetic transitions")]
    for s in stages:
        test = f"{s}/test_success_rate" if s != "eval" else "eval/success_rate"
        rows.append((s, _cell(metrics, f"{s}/seconds", ".0f"), _cell(metrics, f"{s}/val_success_rate", ".3f"),
                     _cell(metrics, test, ".3f"), _cell(metrics, f"{s}/real_transitions", ".0f"),
                     _cell(metrics, f"{s}/synthetic_transitions", ".0f")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])
